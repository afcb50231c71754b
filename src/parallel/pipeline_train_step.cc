// PipelineStrategy::run_train_step (strata/parallel/pipeline_strategy.h): a program's training step through the
// strategy's stages, run as a ThreadPipeline with the program's own loss and optimizer, the trackers fed from the loss
// stage's predictions.
// Thread-safety: the replica's thread (the strategy has one local replica); the trackers are updated from the loss
// stage's thread while that thread waits for the step.
#include <algorithm>

#include "strata/error.h"
#include "strata/nn/layer.h"
#include "strata/parallel/pipeline.h"
#include "strata/parallel/pipeline_strategy.h"

namespace strata::parallel {

std::optional<double> PipelineStrategy::run_train_step(distribute::TrainingProgram& program,
                                                       const data::Element& batch) {
  const nn::Layer& model = program.program_layer();
  STRATA_CHECK(batch.size() == 2, InvalidArgument,
               "train_step under PipelineStrategy: model '" << model.name()
                                                            << "' trains on elements (x, y); got one of "
                                                            << batch.size()
                                                            << " component(s) (sample weights are not pipelined yet)");
  const Tensor& x = batch[0];
  const Tensor& y = batch[1];
  const std::shared_ptr<losses::Loss> loss = program.compiled_loss();
  const std::shared_ptr<optim::Optimizer> optimizer = program.compiled_optimizer();
  const PipelineKey key{&program, loss.get(), optimizer.get()};
  if (!pipeline_ || !(pipeline_key_ == key)) {
    STRATA_CHECK(program.runs_layers_in_order(), InvalidArgument,
                 "train_step under PipelineStrategy: model '" << model.name() << "' is a " << model.class_name()
                                                              << "; stages are cut from a Sequential model's layers");
    PipelineOptions options{.example_shape = Shape(x.shape().begin() + 1, x.shape().end())};
    options.replicas = replica_group();  // across workers: one pipeline replica each
    if (const distribute::CommunicationOptions* communication = replica_communication()) {
      options.bytes_per_pack = communication->bytes_per_pack;  // --bytes-per-pack, as for multi_worker_mirrored
      options.timeout = communication->timeout;                // --collective-timeout
    }
    if (options_.recompute) {
      for (int s = 0; s < schedule_.stages; ++s) options.recompute_stages.push_back(s);
    }
    options.on_predictions = [&program](const Tensor& y_true, const Tensor& y_pred) {
      program.track_predictions(y_true, y_pred);
    };
    const Tensor micro_batch = x.slice(0, std::max<int64_t>(1, x.dim(0) / schedule_.micro_batches));
    pipeline_.reset();  // the old stages' threads end before the new ones start
    pipeline_ = std::make_shared<ThreadPipeline>(split(model.layers(), micro_batch), schedule_, loss, optimizer,
                                                 std::move(options));
    pipeline_key_ = key;
  }
  const double step_loss = pipeline_->train_step(x, y);
  record_step(pipeline_->last_bubble_fraction(), pipeline_->last_timings());
  program.track_step_loss(step_loss, y.dim(0));
  return step_loss;
}

}  // namespace strata::parallel
