// Counter-based random numbers (Philox-4x32-10) and the distributions strata draws from.
//
// A Generator is (seed, stream, offset). The same seed and stream always give the same numbers on
// every machine; different streams of one seed never overlap, so replica r of worker w can draw
// from `Generator(seed, stream)` with a stream derived from (w, r) and stay reproducible and
// disjoint. `offset` counts 128-bit blocks consumed, so a Generator's state is three integers that
// checkpoints save and restore. Block i of a fill is the counter offset + i whichever thread computes it, so
// results do not depend on thread counts (fill_bernoulli, dropout's mask, splits its blocks across threads).
//
// Thread-safety: a Generator is not synchronised; give each thread its own (use `split`).
// `default_generator()` is per thread.
#pragma once

#include <array>
#include <cstdint>

namespace strata {

class Tensor;

class Generator {
 public:
  struct State {
    uint64_t seed = 0;
    uint64_t stream = 0;
    uint64_t offset = 0;
    bool operator==(const State&) const = default;
  };

  explicit Generator(uint64_t seed = 0, uint64_t stream = 0) : state_{seed, stream, 0} {}
  explicit Generator(State state) : state_(state) {}

  // The next 128-bit block as four 32-bit words; advances offset by one.
  std::array<uint32_t, 4> next_block();
  // One uniform float in [0, 1) (consumes one block).
  float uniform();
  // A uniform integer in [0, n) (consumes one block); n > 0.
  uint64_t uniform_int(uint64_t n);

  // Fill float32 buffers. Each call consumes whole blocks.
  void fill_uniform(float* out, int64_t n, float low, float high);
  void fill_normal(float* out, int64_t n, float mean, float stddev);
  // Normal values redrawn until they fall within two standard deviations (like TensorFlow's).
  void fill_truncated_normal(float* out, int64_t n, float mean, float stddev);
  // 1 with probability `p`, else 0. Runs on up to num_threads() threads (strata/threading.h): element i comes from
  // block i / 4 of the reserved run whichever thread draws it, so the values equal a sequential fill's.
  void fill_bernoulli(float* out, int64_t n, float p);

  // A generator with the same seed on another stream (disjoint numbers).
  Generator split(uint64_t stream) const { return Generator(state_.seed, stream); }

  const State& state() const { return state_; }
  void set_state(const State& s) { state_ = s; }

 private:
  State state_;
};

// The calling thread's generator (seed 0 until `manual_seed`).
Generator& default_generator();
// Re-seeds the calling thread's default generator.
void manual_seed(uint64_t seed);

}  // namespace strata
