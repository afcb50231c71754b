// Tensor-parallel layers (strata/parallel/tensor_parallel.h) with their ranks as threads of this process:
// (a) each split (column-split Dense with its output gathered, row-split Dense taking the whole input, the Megatron
//     pair, channel-split Conv2D, row-split Embedding) gives, on 2 and 4 ranks, the unsplit layer's output, input
//     gradient and weight gradients (the ranks' shards joined) to 1e-5, and after K = 3 steps of SGD with momentum on
//     a small model around it, the unsplit model's weights (1e-5 relative) on every rank;
// (b) a counting communicator (a local group's ranks wrapped) shows the collectives each split issues forward and
//     backward, as the header states;
// (c) sizes that do not divide over the group, a rank outside the group and a missing communicator are clear
//     InvalidArguments;
// (d) the Megatron pair trains the same over Gloo communicators, 2 ranks as threads (an in-memory store), and
// (e) as 2 processes (this binary re-run for the hidden test TensorParallelGlooChild.TrainsOneRank, a file store in a
//     temp dir; each child saves its weights as safetensors; children die with the test, PR_SET_PDEATHSIG, and are
//     killed and reaped on every path by test::HelperProcess).
#include "strata/parallel/tensor_parallel.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_test_util.h"
#include "forwarding_communicator.h"
#include "kernels/kernels.h"
#include "strata/comm/gloo.h"
#include "strata/comm/local.h"
#include "strata/comm/store.h"
#include "strata/gradient_tape.h"
#include "strata/io/safetensors.h"
#include "strata/nn/nn.h"
#include "strata/ops.h"
#include "strata/optim/optimizers.h"
#include "test_util.h"

namespace strata::parallel {
namespace {

using namespace std::chrono_literals;
using CommPtr = std::shared_ptr<comm::Communicator>;
using Layers = std::vector<std::shared_ptr<nn::Layer>>;

constexpr int64_t kBatch = 4;
constexpr int kSteps = 3;
constexpr int kReplicated = -100;  // a join "axis" for a weight every rank holds whole

// ---------------------------------------------------------------- a counting communicator

// How many collectives a rank issued.
struct Counts {
  int all_reduces = 0;
  int all_gathers = 0;
  bool operator==(const Counts&) const = default;
  Counts operator-(const Counts& o) const { return {all_reduces - o.all_reduces, all_gathers - o.all_gathers}; }
};
std::ostream& operator<<(std::ostream& os, const Counts& c) {
  return os << "{" << c.all_reduces << " all-reduce, " << c.all_gathers << " all-gather}";
}

// Forwards every call to `inner` and counts all-reduces and all-gathers (other collectives are counted as "other");
// `reported_rank` >= 0 makes it claim that rank instead (for the out-of-range test). Used by its rank's thread only.
class CountingCommunicator : public test::ForwardingCommunicator {
 public:
  explicit CountingCommunicator(CommPtr inner, int reported_rank = -1)
      : ForwardingCommunicator(std::move(inner)), reported_rank_(reported_rank) {}
  using ForwardingCommunicator::all_gather;
  using ForwardingCommunicator::all_reduce;
  using ForwardingCommunicator::barrier;
  using ForwardingCommunicator::broadcast;

  int rank() const override { return reported_rank_ >= 0 ? reported_rank_ : inner()->rank(); }
  std::string backend() const override { return "counting " + inner()->backend(); }
  std::shared_ptr<comm::Work> all_reduce(std::vector<Tensor> tensors, comm::ReduceOp op) override {
    ++counts_.all_reduces;
    return inner()->all_reduce(std::move(tensors), op);
  }
  std::shared_ptr<comm::Work> broadcast(std::vector<Tensor> tensors, int root) override {
    ++others_;
    return inner()->broadcast(std::move(tensors), root);
  }
  std::shared_ptr<comm::Work> all_gather(Tensor input, Tensor output) override {
    ++counts_.all_gathers;
    return inner()->all_gather(std::move(input), std::move(output));
  }
  void barrier() override {
    ++others_;
    inner()->barrier();
  }

  Counts counts() const { return counts_; }
  int others() const { return others_; }

 private:
  int reported_rank_;
  Counts counts_;
  int others_ = 0;
};

// Runs fn(rank, communicator) on one thread per rank, the communicators made on those threads by make_comm(rank)
// and wrapped in counters; a rank that throws aborts its group (so the others do not wait for it) and fails the test.
void on_ranks(int world, const std::function<CommPtr(int)>& make_comm,
              const std::function<void(int, const std::shared_ptr<CountingCommunicator>&)>& fn) {
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      CommPtr inner;
      try {
        inner = make_comm(r);
        fn(r, std::make_shared<CountingCommunicator>(inner));
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (inner) inner->abort("rank " + std::to_string(r) + " failed: " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
}

void on_local_ranks(int world, const std::function<void(int, const std::shared_ptr<CountingCommunicator>&)>& fn) {
  const auto group = comm::make_local_group(world, {.timeout = 20s});
  on_ranks(
      world, [&](int r) { return group[r]; }, fn);
}

// ---------------------------------------------------------------- models

std::vector<Variable> weights_of(const Layers& layers) {
  std::vector<Variable> out;
  for (const auto& layer : layers) {
    for (const Variable& w : layer->trainable_variables()) out.push_back(w);
  }
  return out;
}

Variable run(const Layers& layers, Variable x, bool training = false) {
  for (const auto& layer : layers) x = (*layer)(x, training);
  return x;
}

void randomize(const std::vector<Variable>& weights, uint64_t seed) {
  for (Variable w : weights) w.assign(test::random_tensor(w.shape(), ++seed, -0.5f, 0.5f));
}

template <class L>
std::shared_ptr<L> layer_as(const Layers& layers, size_t i) {
  auto layer = std::dynamic_pointer_cast<L>(layers.at(i));
  EXPECT_NE(layer, nullptr) << "layer " << i;
  return layer;
}

// One split under test: the unsplit layers ("core"), how a rank makes its split of them from the unsplit ones, how
// the ranks' weights join into the unsplit ones, the collectives a rank issues, and the model trained around it.
struct Case {
  std::string name;
  Shape core_input;        // a batch's shape
  int64_t vocabulary = 0;  // > 0: the input is ids in [0, vocabulary), without a gradient
  std::function<Layers()> make_core;
  std::function<Layers(const Layers& full_core, CommPtr comm)> make_split_core;
  std::vector<int> join_axes;  // per weight of the core: the axis its shards join along, or kReplicated
  Counts forward, backward;    // per rank and call, with the input wanting a gradient
  // The training model: pre (replicated) -> core -> post (replicated), on inputs of train_input.
  Shape train_input;
  std::function<Layers()> make_pre, make_post;
};

Tensor input_for(const Case& c, const Shape& shape, uint64_t seed) {
  if (c.vocabulary == 0) return test::random_tensor(shape, seed);
  std::vector<int64_t> ids(shape_numel(shape));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + seed * 5) % c.vocabulary);
  return Tensor::from_vector(ids, shape);
}

// The unsplit core, built, with random weights.
Layers full_core(const Case& c) {
  Layers core = c.make_core();
  run(core, Variable(input_for(c, c.core_input, 1)));
  randomize(weights_of(core), 11);
  return core;
}

// The ranks' weights (per rank, in the core's order) joined into the unsplit ones; replicated weights must be the
// same on every rank (to 1e-6) and are given once.
std::vector<Tensor> join(const std::vector<std::vector<Tensor>>& per_rank, const std::vector<int>& axes,
                         const std::string& what) {
  std::vector<Tensor> out;
  EXPECT_EQ(per_rank[0].size(), axes.size()) << what;
  for (size_t i = 0; i < axes.size() && i < per_rank[0].size(); ++i) {
    std::vector<Tensor> parts;
    for (const auto& rank_weights : per_rank) parts.push_back(rank_weights.at(i));
    if (axes[i] == kReplicated) {
      for (size_t r = 1; r < parts.size(); ++r) {
        test::expect_near(parts[r], parts[0], 1e-6f);
      }
      out.push_back(parts[0]);
    } else {
      out.push_back(kernels::concat(parts, axes[i]));
    }
  }
  return out;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_vector<float>(), w = want.to_vector<float>();
  for (size_t j = 0; j < g.size(); ++j) {
    ASSERT_NEAR(g[j], w[j], 1e-5 * std::max(1.0f, std::abs(w[j]))) << what << ": element " << j;
  }
}

void expect_all_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i], what + ", weight " + std::to_string(i));
}

// ---------------------------------------------------------------- (a), (b): one call, forward and backward

struct CallResult {
  Tensor y, dx;
  std::vector<Tensor> dw;
  Counts forward, backward;
};

// y = core(x); loss = sum(y * seed_tensor); the gradients of x (unless ids) and of the weights.
CallResult call_once(const Case& c, const Layers& core, const Tensor& x_value, const CountingCommunicator* counter) {
  CallResult out;
  const bool ids = c.vocabulary > 0;
  Variable x(x_value, false);
  GradientTape tape;
  if (!ids) tape.watch(x);
  const Counts before = counter ? counter->counts() : Counts{};
  Variable y = run(core, x);
  const Counts after_forward = counter ? counter->counts() : Counts{};
  Variable loss = sum(y * Variable(test::random_tensor(y.shape(), 99)));
  std::vector<Variable> sources = weights_of(core);
  if (!ids) sources.insert(sources.begin(), x);
  std::vector<Tensor> grads = tape.gradient(loss, sources);
  const Counts after_backward = counter ? counter->counts() : Counts{};
  out.y = y.value().clone();
  if (!ids) {
    out.dx = grads.front();
    grads.erase(grads.begin());
  }
  out.dw = grads;
  out.forward = after_forward - before;
  out.backward = after_backward - after_forward;
  return out;
}

void check_one_call(const Case& c, int world) {
  SCOPED_TRACE(c.name + " on " + std::to_string(world) + " ranks");
  const Layers full = full_core(c);
  const Tensor x = input_for(c, c.core_input, 2);
  const CallResult want = call_once(c, full, x, nullptr);
  std::vector<CallResult> got(world);
  on_local_ranks(world, [&](int r, const std::shared_ptr<CountingCommunicator>& comm) {
    const Layers split = c.make_split_core(full, comm);
    got[r] = call_once(c, split, x, comm.get());
  });
  std::vector<std::vector<Tensor>> dw;
  for (int r = 0; r < world; ++r) {
    const std::string rank = "rank " + std::to_string(r);
    expect_close(got[r].y, want.y, rank + " output");
    if (want.dx.defined()) expect_close(got[r].dx, want.dx, rank + " input gradient");
    EXPECT_EQ(got[r].forward, c.forward) << rank << " forward collectives";
    EXPECT_EQ(got[r].backward, c.backward) << rank << " backward collectives";
    dw.push_back(got[r].dw);
  }
  expect_all_close(join(dw, c.join_axes, "gradients"), want.dw, "weight gradients");
}

// ---------------------------------------------------------------- (a): K steps of training

const optim::SGD& sgd() {
  static const optim::SGD optimizer({.learning_rate = 0.1f, .momentum = 0.9f});
  return optimizer;
}

Tensor targets(int step) { return test::random_tensor({kBatch, 3}, 500 + step); }

// K steps on `model` (its weights `vars`): loss = mean((model(x_k) - t_k)^2).
void train(const Case& c, const Layers& model, const std::vector<Variable>& vars) {
  auto optimizer = sgd().clone();
  for (int k = 0; k < kSteps; ++k) {
    GradientTape tape;
    Variable out = run(model, Variable(input_for(c, c.train_input, 40 + k)), true);
    Variable loss = mean(square(out - Variable(targets(k))));
    optimizer->apply_gradients(tape.gradient(loss, vars), vars);
  }
}

struct Trained {
  std::vector<Tensor> pre, core, post;  // weights after training
};

std::vector<Tensor> values_of(const std::vector<Variable>& vars) {
  std::vector<Tensor> out;
  for (const Variable& v : vars) out.push_back(v.value().clone());
  return out;
}

// The unsplit model pre -> core -> post, built, with random weights (the core's from full_core), and its starting
// weights outside the core (every rank's copy starts from them).
struct Unsplit {
  Layers pre, core, post;
  std::vector<Tensor> pre0, post0;
};

Unsplit make_unsplit(const Case& c) {
  Unsplit u{.pre = c.make_pre(), .core = full_core(c), .post = c.make_post(), .pre0 = {}, .post0 = {}};
  run(u.post, run(u.core, run(u.pre, Variable(input_for(c, c.train_input, 3)))));
  randomize(weights_of(u.pre), 21);
  randomize(weights_of(u.post), 31);
  u.pre0 = values_of(weights_of(u.pre));
  u.post0 = values_of(weights_of(u.post));
  return u;
}

// One rank's split model trained K steps from the unsplit model's starting weights (which it only reads).
Trained train_split_rank(const Case& c, const Unsplit& u, const CommPtr& comm) {
  const Layers split = c.make_split_core(u.core, comm);
  Layers pre = c.make_pre(), post = c.make_post();
  run(post, run(split, run(pre, Variable(input_for(c, c.train_input, 3)))));  // builds (every rank alike)
  const std::vector<Variable> pre_vars = weights_of(pre), post_vars = weights_of(post);
  for (size_t i = 0; i < pre_vars.size(); ++i) Variable(pre_vars[i]).assign(u.pre0[i]);
  for (size_t i = 0; i < post_vars.size(); ++i) Variable(post_vars[i]).assign(u.post0[i]);
  Layers model = pre;
  model.insert(model.end(), split.begin(), split.end());
  model.insert(model.end(), post.begin(), post.end());
  train(c, model, weights_of(model));
  return {values_of(pre_vars), values_of(weights_of(split)), values_of(post_vars)};
}

// The unsplit model trained K steps (after the ranks, which read its starting weights).
Trained train_unsplit(const Case& c, Unsplit& u) {
  Layers model = u.pre;
  model.insert(model.end(), u.core.begin(), u.core.end());
  model.insert(model.end(), u.post.begin(), u.post.end());
  const std::vector<Tensor> core0 = values_of(weights_of(u.core));
  train(c, model, weights_of(model));
  Trained out{values_of(weights_of(u.pre)), values_of(weights_of(u.core)), values_of(weights_of(u.post))};
  // Not a vacuous comparison: training moved every weight of the split layers.
  for (size_t i = 0; i < core0.size(); ++i) {
    EXPECT_NE(core0[i].to_vector<float>(), out.core[i].to_vector<float>())
        << "weight " << i << " of the split layers did not move";
  }
  return out;
}

// Every rank's replicated layers are the unsplit ones, and the ranks' split weights join into the unsplit core's.
void expect_same_training(const Case& c, const std::vector<Trained>& got, const Trained& want) {
  std::vector<std::vector<Tensor>> cores;
  for (size_t r = 0; r < got.size(); ++r) {
    const std::string rank = "rank " + std::to_string(r);
    expect_all_close(got[r].pre, want.pre, rank + " layers before the split");
    expect_all_close(got[r].post, want.post, rank + " layers after the split");
    cores.push_back(got[r].core);
  }
  expect_all_close(join(cores, c.join_axes, "weights"), want.core, "split layers");
}

// The split model on every rank trains to the unsplit model's weights; make_comm(rank) gives rank's communicator.
void check_training(const Case& c, int world, const std::function<CommPtr(int)>& make_comm) {
  SCOPED_TRACE(c.name + " trained on " + std::to_string(world) + " ranks");
  Unsplit unsplit = make_unsplit(c);
  std::vector<Trained> got(world);
  on_ranks(world, make_comm, [&](int r, const std::shared_ptr<CountingCommunicator>& comm) {
    got[r] = train_split_rank(c, unsplit, comm);
  });
  expect_same_training(c, got, train_unsplit(c, unsplit));
}

// ---------------------------------------------------------------- the cases

Layers dense_pre(int64_t features) { return {std::make_shared<nn::Dense>(features, nn::ActivationSpec("tanh"))}; }
Layers dense_post() { return {std::make_shared<nn::Dense>(3)}; }
Layers flatten_post() { return {std::make_shared<nn::Flatten>(), std::make_shared<nn::Dense>(3)}; }

Case column_case() {
  return {.name = "column-split Dense (output gathered)",
          .core_input = {kBatch, 6},
          .make_core = [] { return Layers{std::make_shared<nn::Dense>(12, nn::ActivationSpec("relu"))}; },
          .make_split_core =
              [](const Layers& full, CommPtr comm) {
                auto layer =
                    std::make_shared<ColumnParallelDense>(12, comm, ColumnParallelDenseOptions{.activation = "relu"});
                layer->load_shard_of(*layer_as<nn::Dense>(full, 0));
                return Layers{layer};
              },
          .join_axes = {1, 0},
          .forward = {.all_reduces = 0, .all_gathers = 1},
          .backward = {.all_reduces = 1, .all_gathers = 0},
          .train_input = {kBatch, 5},
          .make_pre = [] { return dense_pre(6); },
          .make_post = dense_post};
}

Case row_case() {
  return {.name = "row-split Dense (whole input)",
          .core_input = {kBatch, 8},
          .make_core = [] { return Layers{std::make_shared<nn::Dense>(5, nn::ActivationSpec("tanh"))}; },
          .make_split_core =
              [](const Layers& full, CommPtr comm) {
                auto layer = std::make_shared<RowParallelDense>(
                    5, comm, RowParallelDenseOptions{.activation = "tanh", .input_is_parallel = false});
                layer->load_shard_of(*layer_as<nn::Dense>(full, 0));
                return Layers{layer};
              },
          .join_axes = {0, kReplicated},
          .forward = {.all_reduces = 1, .all_gathers = 0},
          .backward = {.all_reduces = 0, .all_gathers = 1},
          .train_input = {kBatch, 5},
          .make_pre = [] { return dense_pre(8); },
          .make_post = dense_post};
}

Case pair_case() {
  return {
      .name = "Megatron pair (column- then row-split Dense)",
      .core_input = {kBatch, 6},
      .make_core =
          [] {
            return Layers{std::make_shared<nn::Dense>(16, nn::ActivationSpec("relu")), std::make_shared<nn::Dense>(6)};
          },
      .make_split_core =
          [](const Layers& full, CommPtr comm) {
            auto up = std::make_shared<ColumnParallelDense>(
                16, comm, ColumnParallelDenseOptions{.activation = "relu", .gather_output = false});
            auto down = std::make_shared<RowParallelDense>(6, comm, RowParallelDenseOptions{.input_is_parallel = true});
            up->load_shard_of(*layer_as<nn::Dense>(full, 0));
            down->load_shard_of(*layer_as<nn::Dense>(full, 1));
            return Layers{up, down};
          },
      .join_axes = {1, 0, 0, kReplicated},
      .forward = {.all_reduces = 1, .all_gathers = 0},
      .backward = {.all_reduces = 1, .all_gathers = 0},
      .train_input = {kBatch, 5},
      .make_pre = [] { return dense_pre(6); },
      .make_post = dense_post};
}

Case conv_case() {
  return {.name = "channel-split Conv2D",
          .core_input = {kBatch, 6, 6, 2},
          .make_core = [] { return Layers{std::make_shared<nn::Conv2D>(8, 3, nn::ActivationSpec("relu"))}; },
          .make_split_core =
              [](const Layers& full, CommPtr comm) {
                auto layer = std::make_shared<ChannelParallelConv2D>(
                    8, 3, comm, ChannelParallelConv2DOptions{.activation = "relu"});
                layer->load_shard_of(*layer_as<nn::Conv2D>(full, 0));
                return Layers{layer};
              },
          .join_axes = {3, 0},
          .forward = {.all_reduces = 0, .all_gathers = 1},
          .backward = {.all_reduces = 1, .all_gathers = 0},
          .train_input = {kBatch, 6, 6, 2},
          .make_pre = [] { return Layers{std::make_shared<nn::Conv2D>(2, 1, nn::ActivationSpec("tanh"))}; },
          .make_post = flatten_post};
}

Case embedding_case() {
  return {.name = "row-split Embedding",
          .core_input = {kBatch, 3},
          .vocabulary = 12,
          .make_core = [] { return Layers{std::make_shared<nn::Embedding>(12, 4)}; },
          .make_split_core =
              [](const Layers& full, CommPtr comm) {
                auto layer = std::make_shared<RowParallelEmbedding>(12, 4, comm);
                layer->load_shard_of(*layer_as<nn::Embedding>(full, 0));
                return Layers{layer};
              },
          .join_axes = {0},
          .forward = {.all_reduces = 1, .all_gathers = 0},
          .backward = {.all_reduces = 0, .all_gathers = 0},
          .train_input = {kBatch, 3},
          .make_pre = [] { return Layers{}; },
          .make_post = flatten_post};
}

std::vector<Case> all_cases() { return {column_case(), row_case(), pair_case(), conv_case(), embedding_case()}; }

std::function<CommPtr(int)> local_group(int world) {
  auto group = std::make_shared<std::vector<CommPtr>>(comm::make_local_group(world, {.timeout = 20s}));
  return [group](int r) { return (*group)[r]; };
}

// ---------------------------------------------------------------- tests

TEST(TensorParallelTest, EachSplitGivesTheUnsplitOutputAndGradientsOnTwoAndFourRanks) {
  for (const Case& c : all_cases()) {
    for (int world : {2, 4}) check_one_call(c, world);
  }
}

TEST(TensorParallelTest, EachSplitTrainsToTheUnsplitWeightsOnTwoRanks) {
  for (const Case& c : all_cases()) check_training(c, 2, local_group(2));
}

TEST(TensorParallelTest, EachSplitTrainsToTheUnsplitWeightsOnFourRanks) {
  for (const Case& c : all_cases()) check_training(c, 4, local_group(4));
}

TEST(TensorParallelTest, OneRankIsTheUnsplitLayerWithoutCollectives) {
  for (Case c : all_cases()) {
    c.forward = c.backward = {};
    check_one_call(c, 1);
  }
}

// The halves of the pair and the splits' other modes, counted on their own.
TEST(TensorParallelTest, CountsTheCollectivesOfEachMode) {
  on_local_ranks(2, [](int r, const std::shared_ptr<CountingCommunicator>& comm) {
    Variable x(test::random_tensor({kBatch, 6}, 5), false);
    ColumnParallelDense up(16, comm, {.activation = "relu", .gather_output = false});
    RowParallelDense down(6, comm, {.input_is_parallel = true});
    ColumnParallelDense gathered(16, comm);
    ChannelParallelConv2D conv(4, 3, comm, {.gather_output = false});
    Variable image(test::random_tensor({kBatch, 5, 5, 2}, 6), false);
    GradientTape tape;
    tape.watch(x);
    tape.watch(image);

    Counts start = comm->counts();
    Variable h = up(x);  // its slice of the hidden units: no communication
    EXPECT_EQ(comm->counts() - start, Counts{}) << "column split without gather, forward";
    EXPECT_EQ(h.shape(), (Shape{kBatch, 8}));
    start = comm->counts();
    Variable y = down(h);
    EXPECT_EQ(comm->counts() - start, (Counts{.all_reduces = 1})) << "row split of a parallel input, forward";
    start = comm->counts();
    Variable c = conv(image);
    EXPECT_EQ(comm->counts() - start, Counts{}) << "channel split without gather, forward";
    EXPECT_EQ(c.shape(), (Shape{kBatch, 3, 3, 2}));

    // Backward: the pair issues one all-reduce (the copy on its input); the row split none, the column split's
    // gradient of a weight needs none either (only its input's gradient is summed).
    start = comm->counts();
    tape.gradient(sum(y), {down.kernel(), down.bias(), up.kernel()});
    EXPECT_EQ(comm->counts() - start, Counts{}) << "weight gradients of the pair";
    GradientTape tape2;
    tape2.watch(x);
    Variable y2 = down(up(x));
    start = comm->counts();
    tape2.gradient(sum(y2), {x});
    EXPECT_EQ(comm->counts() - start, (Counts{.all_reduces = 1})) << "input gradient of the pair";

    // The first layer of a model (an input without a gradient): the column split's backward is free.
    GradientTape tape3;
    Variable z = gathered(Variable(test::random_tensor({kBatch, 6}, 7), false));
    start = comm->counts();
    tape3.gradient(sum(z), {gathered.kernel()});
    EXPECT_EQ(comm->counts() - start, Counts{}) << "column split on data, backward";
    EXPECT_EQ(comm->others(), 0) << "rank " << r;
  });
}

// The collectives as ops: copy/reduce and gather/scatter are each other's transposes.
TEST(TensorParallelTest, CollectiveOpsForwardAndBackward) {
  on_local_ranks(2, [](int r, const std::shared_ptr<CountingCommunicator>& comm) {
    const float base = static_cast<float>(r + 1);  // rank 0 holds 1s, rank 1 2s
    Variable x(Tensor::full({2, 3}, base), false);
    GradientTape tape;
    tape.watch(x);
    Variable copied = copy_to_tensor_parallel(x, *comm);
    Variable reduced = reduce_from_tensor_parallel(x, *comm);
    Variable gathered = gather_from_tensor_parallel(x, *comm, -1);
    Variable gathered0 = gather_from_tensor_parallel(x, *comm, 0);
    Variable scattered = scatter_to_tensor_parallel(gathered, *comm, 1);
    EXPECT_EQ(copied.value().to_vector<float>(), std::vector<float>(6, base));
    EXPECT_EQ(reduced.value().to_vector<float>(), std::vector<float>(6, 3.0f));
    EXPECT_EQ(gathered.shape(), (Shape{2, 6}));
    EXPECT_EQ(gathered.value().to_vector<float>(), (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2}));
    EXPECT_EQ(gathered0.shape(), (Shape{4, 3}));
    EXPECT_EQ(gathered0.value().to_vector<float>(), (std::vector<float>{1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}));
    EXPECT_EQ(scattered.value().to_vector<float>(), std::vector<float>(6, base));
    // d/dx of sum(copied * (r + 1)) summed over ranks: 1 + 2 everywhere.
    EXPECT_EQ(tape.gradient(sum(copied * base), {x})[0].to_vector<float>(), std::vector<float>(6, 3.0f));
    GradientTape tape_reduce;
    tape_reduce.watch(x);
    Variable reduced2 = reduce_from_tensor_parallel(x, *comm);
    EXPECT_EQ(tape_reduce.gradient(sum(reduced2 * base), {x})[0].to_vector<float>(), std::vector<float>(6, base));
    // gather's backward: this rank's columns of the gradient; weights 0..11 over the gathered [2, 6].
    GradientTape tape_gather;
    tape_gather.watch(x);
    Variable g = gather_from_tensor_parallel(x, *comm, -1);
    std::vector<float> w(12);
    for (int i = 0; i < 12; ++i) w[i] = static_cast<float>(i);
    const std::vector<float> dx =
        tape_gather.gradient(sum(g * Variable(Tensor::from_vector(w, {2, 6}))), {x})[0].to_vector<float>();
    const std::vector<float> want =
        r == 0 ? std::vector<float>{0, 1, 2, 6, 7, 8} : std::vector<float>{3, 4, 5, 9, 10, 11};
    EXPECT_EQ(dx, want);
    // scatter's backward: the ranks' gradients side by side (rank 0's 1s, rank 1's 2s).
    GradientTape tape_scatter;
    Variable whole(Tensor::zeros({2, 4}), false);
    tape_scatter.watch(whole);
    Variable mine = scatter_to_tensor_parallel(whole, *comm, -1);
    EXPECT_EQ(tape_scatter.gradient(sum(mine * base), {whole})[0].to_vector<float>(),
              (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2}));
  });
}

TEST(TensorParallelTest, SizesThatDoNotDivideOverTheGroupAreInvalid) {
  const auto group = comm::make_local_group(4);
  const CommPtr comm = group[1];
  const auto message = [](auto make) { return test::message_of<InvalidArgument>(make); };
  EXPECT_NE(
      message([&] { ColumnParallelDense(10, comm); }).find("units 10 is not a positive multiple of the world size 4"),
      std::string::npos);
  EXPECT_NE(message([&] {
              ChannelParallelConv2D(6, 3, comm);
            }).find("filters 6 is not a positive multiple of the world size 4"),
            std::string::npos);
  EXPECT_NE(message([&] {
              RowParallelEmbedding(10, 3, comm);
            }).find("input_dim 10 is not a positive multiple of the world size 4"),
            std::string::npos);
  // The row split's input size is known when it is built (or loaded).
  RowParallelDense row(4, comm, {.input_is_parallel = false});
  EXPECT_NE(message([&] {
              row.build({{2, 6}});
            }).find("input features 6 is not a positive multiple of the world size 4"),
            std::string::npos);
  nn::Dense full(4);
  full(Variable(Tensor::zeros({1, 6})));
  EXPECT_NE(message([&] { RowParallelDense(4, comm).load_shard_of(full); }).find("input features 6"),
            std::string::npos);
  EXPECT_NE(message([&] {
              shard_of(Tensor::zeros({6, 2}), 0, 0, 4);
            }).find("axis 0 of [6, 2] 6 is not a positive multiple of the world size 4"),
            std::string::npos);
  // A Dense whose units differ from the split's.
  EXPECT_NE(message([&] { ColumnParallelDense(8, comm).load_shard_of(full); }).find("wants a Dense of 8 units"),
            std::string::npos);
}

TEST(TensorParallelTest, ARankOutsideTheGroupOrNoCommunicatorIsInvalid) {
  const auto group = comm::make_local_group(2);
  const auto liar = std::make_shared<CountingCommunicator>(group[0], 2);  // claims rank 2 of a group of 2
  const auto message = [](auto make) { return test::message_of<InvalidArgument>(make); };
  EXPECT_NE(message([&] { ColumnParallelDense(4, liar); }).find("rank 2 is outside [0, 2)"), std::string::npos);
  EXPECT_NE(message([&] { RowParallelEmbedding(4, 2, liar); }).find("rank 2 is outside [0, 2)"), std::string::npos);
  EXPECT_NE(message([] { shard_range(8, -1, 2); }).find("rank -1 is outside [0, 2)"), std::string::npos);
  EXPECT_NE(message([] { shard_of(Tensor::zeros({8}), 0, 4, 4); }).find("rank 4 is outside [0, 4)"), std::string::npos);
  EXPECT_NE(message([] { RowParallelDense(4, nullptr); }).find("needs a communicator"), std::string::npos);
  const ShardRange range = shard_range(12, 2, 4);
  EXPECT_EQ(range.begin, 6);
  EXPECT_EQ(range.end, 9);
}

TEST(TensorParallelTest, CollectivesTakeFloat32) {
  const auto group = comm::make_local_group(1);
  const Variable ids(Tensor::from_vector(std::vector<int64_t>{1, 2}, {2}));
  EXPECT_NE(test::message_of<InvalidArgument>([&] {
              reduce_from_tensor_parallel(ids, *group[0]);
            }).find("reduce_from_tensor_parallel takes float32 tensors, got int64"),
            std::string::npos);
  EXPECT_NE(test::message_of<InvalidArgument>([&] {
              gather_from_tensor_parallel(ids, *group[0]);
            }).find("gather_from_tensor_parallel takes float32 tensors"),
            std::string::npos);
}

TEST(TensorParallelTest, EmbeddingIdsOutsideTheVocabularyAreInvalidOnEveryRank) {
  on_local_ranks(2, [](int, const std::shared_ptr<CountingCommunicator>& comm) {
    RowParallelEmbedding embedding(8, 2, comm);
    const std::string message = test::message_of<InvalidArgument>([&] {
      embedding(Variable(Tensor::from_vector(std::vector<int64_t>{1, 8}, {2})));
    });
    EXPECT_NE(message.find("index 8 (element 1 of input [2]) is outside [0, input_dim = 8)"), std::string::npos)
        << message;
    EXPECT_EQ(comm->counts(), Counts{});  // refused before any collective, so no rank waits for another
  });
}

// ---------------------------------------------------------------- (d) Gloo

TEST(TensorParallelGlooTest, MegatronPairTrainsToTheUnsplitWeightsOverGlooAsThreads) {
  auto store = comm::make_in_memory_store(20s);
  check_training(pair_case(), 2, [store](int r) {
    return comm::make_gloo_communicator(store, r, 2, {.timeout = 20s, .prefix = "tensor-parallel"});
  });
}

// ---------------------------------------------------------------- (e) Gloo, ranks as processes

// The child's spec: "<parent pid> <rank> <dir>".
constexpr const char* kChildVariable = "STRATA_TENSOR_PARALLEL_CHILD";

std::string weights_file(const std::string& dir, int rank) {
  return dir + "/rank" + std::to_string(rank) + ".safetensors";
}
std::string error_file(const std::string& dir, int rank) { return dir + "/error" + std::to_string(rank) + ".txt"; }

// The hidden child: trains one rank of the Megatron pair model over Gloo (a file store in the parent's temp dir) and
// saves its weights ("pre/i", "core/i", "post/i"); exit status 0, or 1 with the error in its error file. Does nothing
// unless this binary was re-run by the test below.
TEST(TensorParallelGlooChild, TrainsOneRank) {
  const char* spec = std::getenv(kChildVariable);
  if (spec == nullptr) GTEST_SKIP() << "a helper process of TensorParallelGlooTest.MegatronPair...AsTwoProcesses";
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
  std::istringstream in(spec);
  pid_t parent = 0;
  int rank = 0;
  std::string dir;
  in >> parent >> rank >> dir;
  if (::getppid() != parent) ::_exit(5);  // the parent died before the line above
  ::alarm(60);                            // a last resort should the parent fail to kill it
  int status = 0;
  try {
    auto store = comm::make_file_store(dir + "/store", 20s);
    auto comm = comm::make_gloo_communicator(store, rank, 2, {.timeout = 20s, .prefix = "tensor-parallel"});
    const Case c = pair_case();
    const Trained trained = train_split_rank(c, make_unsplit(c), comm);
    io::NamedTensors named;
    for (const auto& [part, weights] :
         {std::pair{"pre", &trained.pre}, std::pair{"core", &trained.core}, std::pair{"post", &trained.post}}) {
      for (size_t i = 0; i < weights->size(); ++i) {
        named.emplace_back(std::string(part) + "/" + std::to_string(i), (*weights)[i]);
      }
    }
    io::save_safetensors(weights_file(dir, rank), named);
  } catch (const std::exception& e) {
    std::ofstream(error_file(dir, rank)) << e.what();
    status = 1;
  }
  std::fflush(nullptr);
  ::_exit(status);  // no gtest epilogue: the status is the child's verdict
}

// The exit status of child `pid` once it has exited (128 + signal when killed), or -1 after `deadline`; leaves it
// unreaped (test::HelperProcess reaps it).
int wait_for_exit(pid_t pid, std::chrono::seconds deadline) {
  const auto give_up = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < give_up) {
    siginfo_t info{};
    if (::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) {
      return info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
    }
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TensorParallelGlooTest, MegatronPairTrainsToTheUnsplitWeightsAsTwoProcesses) {
  test::TempDir dir("strata_tensor_parallel");
  std::vector<std::unique_ptr<test::HelperProcess>> children;
  for (int r = 0; r < 2; ++r) {
    children.push_back(std::make_unique<test::HelperProcess>(
        "TensorParallelGlooChild.TrainsOneRank",
        std::string(kChildVariable) + "=" + std::to_string(::getpid()) + " " + std::to_string(r) + " " + dir.path()));
  }
  std::vector<Trained> got(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(wait_for_exit(children[r]->pid(), 60s), 0) << "rank " << r << ": " << slurp(error_file(dir.path(), r));
    for (const auto& [name, tensor] : io::load_safetensors(weights_file(dir.path(), r))) {
      const std::string part = name.substr(0, name.find('/'));
      (part == "pre" ? got[r].pre : part == "core" ? got[r].core : got[r].post).push_back(tensor);
    }
  }
  const Case c = pair_case();
  Unsplit unsplit = make_unsplit(c);
  expect_same_training(c, got, train_unsplit(c, unsplit));
}

}  // namespace
}  // namespace strata::parallel
