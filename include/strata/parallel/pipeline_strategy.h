// PipelineStrategy: a Sequential model's training steps run as a pipeline of stages (threads of this process), with
// micro-batches run in the order of a schedule (strata/parallel/schedule.h); evaluate and predict run the whole
// model on the calling thread, as under OneDeviceStrategy. The strategy takes over the model's train_step
// (run_train_step), so Model::fit and a custom loop's strategy.run of it both pipeline.
//
//   parallel::PipelineStrategy strategy({.stages = 2, .micro_batches = 4, .schedule = "1f1b"});
//   auto scope = strategy.scope();
//   Sequential model({...});
//   model.compile(...);
//   model.fit(train, {.epochs = 5});   // each global batch: 4 micro-batches through 2 stages
//   strategy.run([&](const data::Element& b) { return model.train_step(b); }, batch);  // one more, pipelined
//
// The layers are cut into stages * chunks consecutive virtual stages, at `bounds` when given, else balanced by
// their measured time (or parameter count). The weights after each step are the unsplit model's (see
// strata/parallel/pipeline.h).
//
// Across workers (pipeline × data parallelism): given a cluster (TF_CONFIG, as MultiWorkerMirroredStrategy), every
// worker process runs the whole pipeline on its own threads over its share of each global batch, and the stages'
// gradients are all-reduced across the workers before the optimizer step (PipelineOptions::replicas), so N workers
// train exactly as one pipeline on the whole batches. Variables start from the chief's values; the input is shared
// out, metrics summed and checkpoints written by the chief as under MultiWorkerMirroredStrategy, over a worker group
// as MultiWorkerMirroredStrategy's (Gloo through the coordination service, heartbeats, a lost worker named).
//
// Thread-safety: as every strategy, driven by one thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/cluster/cluster_resolver.h"
#include "strata/distribute/multi_worker.h"
#include "strata/distribute/strategy.h"
#include "strata/distribute/worker_group_strategy.h"
#include "strata/parallel/pipeline.h"
#include "strata/parallel/schedule.h"

namespace strata::parallel {

struct PipelineStrategyOptions {
  int stages = 2;
  int micro_batches = 4;
  std::string schedule = "1f1b";  // gpipe, 1f1b, interleaved, zb-h1
  int chunks = 0;                 // interleaved: model chunks per stage (0: 2); 1 for the others
  // Where virtual stages 1, 2, ... start, as indices into the model's layers (stages * chunks - 1 of them); empty:
  // balanced as `balance` says.
  std::vector<int> bounds;
  // "time": each layer's forward and backward timed on the first micro-batch (split_by_time); "parameters": by
  // trainable parameter count (split_by_parameters).
  std::string balance = "time";
  // Every stage recomputes its activations before the backward instead of keeping them (PipelineOptions).
  bool recompute = false;
};

class PipelineStrategy final : public distribute::WorkerGroupStrategy {
 public:
  // InvalidArgument for a schedule that cannot run with these counts (the message says why).
  explicit PipelineStrategy(PipelineStrategyOptions options = {});
  // One pipeline replica per worker of `task`'s cluster (a cluster of one worker: as the constructor above); blocks
  // until every worker has connected, as MultiWorkerMirroredStrategy's.
  PipelineStrategy(PipelineStrategyOptions options, const cluster::TaskInfo& task,
                   distribute::CommunicationOptions communication = {});
  ~PipelineStrategy() override;
  std::string name() const override { return "PipelineStrategy"; }
  // The program's training step on `batch` (x, y) through the stages: the pipeline is made at the first step and kept
  // while the program, its loss and its optimizer stay the same; the loss and the predictions feed its trackers.
  // InvalidArgument for a model that is not a plain stack of layers, or a batch with sample weights.
  std::optional<double> run_train_step(distribute::TrainingProgram& program, const data::Element& batch) override;
  // The group of the workers' pipeline replicas, one rank per worker, for PipelineOptions::replicas; null on one
  // worker.
  comm::Communicator* replica_group() const;
  // How the replicas' gradients travel (bucket size, the collectives' timeout); null on one worker.
  const distribute::CommunicationOptions* replica_communication() const;
  // "gloo" or "mpi" across workers, "" on one.
  std::string backend() const;

  const PipelineStrategyOptions& options() const { return options_; }
  const Schedule& schedule() const { return schedule_; }
  // `layers` cut into the schedule's virtual stages (InvalidArgument when they cannot be); `micro_batch` is a
  // micro-batch of inputs, for balance "time".
  // Remembers the cut for layout().
  std::vector<StageLayers> split(const std::vector<std::shared_ptr<nn::Layer>>& layers, const Tensor& micro_batch);
  // The last split's layers by name, a virtual stage per bracket: "[conv2d max_pooling2d] [flatten dense dense_1]".
  const std::string& layout() const { return layout_; }
  // "PipelineStrategy, 2 stages, 4 micro-batches, schedule 1f1b, simulated bubble 20.0%".
  std::string describe() const;

  // What the training steps run under this strategy measured (Model::fit records each step).
  struct Measured {
    int64_t steps = 0;
    double bubble_fraction_sum = 0;     // of ThreadPipeline::last_bubble_fraction, over the steps
    std::vector<int> peak_activations;  // per stage, the most over the steps
    double mean_bubble_fraction() const { return steps ? bubble_fraction_sum / static_cast<double>(steps) : 0; }
  };
  void record_step(double bubble_fraction, const std::vector<StageTiming>& timings);
  const Measured& measured() const { return measured_; }

 private:
  PipelineStrategyOptions options_;
  Schedule schedule_;
  Measured measured_;
  std::string layout_;
  // The stages run_train_step runs, and what they were made for.
  std::shared_ptr<ThreadPipeline> pipeline_;
  struct PipelineKey {
    const void* program = nullptr;
    const void* loss = nullptr;
    const void* optimizer = nullptr;
    bool operator==(const PipelineKey&) const = default;
  } pipeline_key_;
};

}  // namespace strata::parallel
