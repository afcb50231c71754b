// Pipeline parallelism: a model's layers cut into consecutive virtual stages, each stage (a thread or a process)
// running its part of a schedule (strata/parallel/schedule.h) over the micro-batches of every global batch.
//
//   auto pieces = parallel::split_by_parameters(model.layers(), 4);      // 4 virtual stages
//   parallel::ThreadPipeline pipe(pieces, parallel::one_f_one_b(4, 8), loss, optimizer, {.example_shape = {784}});
//   float loss = pipe.train_step(x, y);                                  // one optimizer step on the batch
//
// A step splits the global batch of B examples into M micro-batches (the first B % M get one more example),
// runs the schedule, and applies each stage's summed micro-batch gradients with the stage's own optimizer. The
// loss of micro-batch m is scaled by b_m / B, so the gradients are the unsplit model's on the whole batch: after K
// steps the weights are the unsplit model's to float rounding, whatever the schedule, M or the stages. Layers
// whose result depends on the batch they see (BatchNormalization in training) see micro-batches, as in GPipe.
//
// Activations and their gradients travel through a Communicator's send/recv (rank = stage), so the same
// PipelineStage runs with stages as threads of one process (comm/local.h) or as processes (Gloo).
//
// Thread-safety: a PipelineStage is used by one thread at a time; each stage's layers must be touched only by its
// stage while a step runs. ThreadPipeline::train_step is called from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "strata/comm/communicator.h"
#include "strata/nn/layer.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizer.h"
#include "strata/parallel/schedule.h"
#include "strata/tensor.h"

namespace strata::parallel {

// Consecutive layers of the model that one virtual stage runs.
using StageLayers = std::vector<std::shared_ptr<nn::Layer>>;

// Cuts `layers` into `pieces` consecutive, non-empty ranges whose trainable parameter counts are as even as the
// layer boundaries allow (the largest piece as small as possible). InvalidArgument for pieces < 1, more pieces
// than layers, or a layer not built yet (it has no weights to count).
std::vector<StageLayers> split_by_parameters(const std::vector<std::shared_ptr<nn::Layer>>& layers, int pieces);
// Cuts `layers` where their measured time is most even: each layer's forward and backward on `sample` (a
// micro-batch of inputs), the fastest of `repeats` runs, in inference mode (no layer changes its state).
std::vector<StageLayers> split_by_time(const std::vector<std::shared_ptr<nn::Layer>>& layers, int pieces,
                                       const Tensor& sample, int repeats = 3);
// Cuts `layers` at the given indices: bounds {2, 5} over 7 layers gives [0, 2), [2, 5), [5, 7).
std::vector<StageLayers> split_at(const std::vector<std::shared_ptr<nn::Layer>>& layers,
                                  const std::vector<int>& bounds);

struct PipelineOptions {
  Shape example_shape;  // one example's input shape (no batch axis), e.g. {28, 28, 1}
  // Each wait for another stage's tensor; a stage that is gone fails the step instead of hanging it.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Called on the stage holding the loss, from its thread, after each micro-batch's forward with that micro-batch's
  // targets and the model's outputs (for metrics); the tensors are not changed afterwards.
  std::function<void(const Tensor& y_true, const Tensor& y_pred)> on_predictions;
  // Stages that recompute their activations: between a micro-batch's forward and its backward they keep only the
  // stage's input, and run the forward again (recorded) just before the backward. Less memory, one more forward.
  // The rerun draws the same random numbers (the thread's default generator is put back) and leaves layer state
  // (BatchNormalization's moving statistics) as the first forward left it.
  std::vector<int> recompute_stages;
  // Data parallelism: the group of this pipeline's replicas, one rank each (threads of a local group, or processes;
  // not owned: it outlives the pipeline). Every replica runs the whole pipeline on its own share of the global batch,
  // and before the optimizer step the gradients are summed over the group weighted by each replica's examples, so
  // every replica takes the same step: that of one pipeline on the replicas' batches together (and the step's loss
  // is theirs together). A replica whose share is empty takes the step too. The gradients go through the same
  // bucketed reducer as MultiWorkerMirroredStrategy's, each weight's as soon as its stage has run the step's last
  // backward action that adds to it, so that the buckets' all-reduces overlap the rest of the stages' backward; the
  // replicas' rows and loss ride in the last bucket. A ThreadPipeline reduces all its stages' gradients in one
  // reduction; a PipelineStage with its own optimizer (stages as processes) its own stage's, so its group joins that
  // stage of every replica.
  comm::Communicator* replicas = nullptr;
  // With replicas: the gradients are all-reduced in buckets of about this many bytes, the weights whose gradients
  // are final first in the first bucket (as CommunicationOptions::bytes_per_pack; a larger weight is a bucket of its
  // own). Smaller buckets start earlier, at the cost of a collective each.
  int64_t bytes_per_pack = 25 << 20;
};

// What one stage measured in its last step.
struct StageTiming {
  double step_seconds = 0;     // from the step's start to its last action's end
  double compute_seconds = 0;  // in forward and backward actions (the rest is waiting for other stages)
  int peak_activations = 0;    // the most micro-batches whose forward state (tape, input, output) was kept at once
  // The most bytes of activations kept at once: each kept micro-batch's stage input and layer outputs (its input only
  // on a stage that recomputes).
  int64_t peak_activation_bytes = 0;
};

// One stage of a pipeline: the virtual stages `schedule.stage_of(v) == stage` of `virtual_stages` (the whole
// model's, each process or thread holds all of them, built, with the same weights where it matters: only its own
// are used and updated). `loss` is used by the stage holding the last virtual stage, `optimizer` (cloned) for this
// stage's weights. `comm` has schedule.stages ranks and this stage is rank `stage`.
class PipelineStage {
 public:
  PipelineStage(const std::vector<StageLayers>& virtual_stages, int stage, Schedule schedule,
                std::shared_ptr<losses::Loss> loss, const optim::Optimizer& optimizer,
                std::shared_ptr<comm::Communicator> comm, PipelineOptions options);
  ~PipelineStage();
  PipelineStage(const PipelineStage&) = delete;
  PipelineStage& operator=(const PipelineStage&) = delete;

  // One training step on the global batch: x [B, example_shape...] (read by stage 0 only) and y [B, ...] (read by
  // the stage holding the loss); every stage is given the same B. Returns the batch's mean loss on the stage
  // holding the loss, NaN on the others. InvalidArgument when 0 < B < micro_batches, or B = 0 without replicas.
  float train_step(const Tensor& x, const Tensor& y);

  int stage() const;
  bool holds_loss() const;
  // This stage's trainable weights, chunk by chunk.
  std::vector<Variable> trainable_variables() const;
  const StageTiming& last_timing() const;

 private:
  friend class ThreadPipeline;  // applies its stages' gradients with one optimizer; reports the first failure
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The stages of `schedule` as threads of this process, connected by a local communicator group. One optimizer
// serves every stage: after the stages have run the step, it applies all their summed gradients in one call, so its
// step count, slots and learning-rate schedule are those of the unsplit model (and a checkpoint of it holds them).
// Each stage thread's kernels use the constructing thread's num_threads() / stages threads (at least one).
// Each stage thread draws random numbers (Dropout's) from its own generator, split from the constructing thread's
// default generator and carried from step to step.
class ThreadPipeline {
 public:
  // Trains with `optimizer` itself (e.g. a Model's compiled optimizer).
  ThreadPipeline(const std::vector<StageLayers>& virtual_stages, Schedule schedule, std::shared_ptr<losses::Loss> loss,
                 std::shared_ptr<optim::Optimizer> optimizer, PipelineOptions options);
  // Trains with a copy of `optimizer`.
  ThreadPipeline(const std::vector<StageLayers>& virtual_stages, Schedule schedule, std::shared_ptr<losses::Loss> loss,
                 const optim::Optimizer& optimizer, PipelineOptions options);
  ~ThreadPipeline();
  ThreadPipeline(const ThreadPipeline&) = delete;
  ThreadPipeline& operator=(const ThreadPipeline&) = delete;

  // One step on every stage at once; the batch's mean loss (with replicas, over every replica's batch). A stage's
  // error is rethrown here.
  float train_step(const Tensor& x, const Tensor& y);
  // Per stage, what it measured in the last step.
  std::vector<StageTiming> last_timings() const;
  // The idle share of the last step: 1 - sum(compute) / (stages * the longest step).
  double last_bubble_fraction() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::parallel
