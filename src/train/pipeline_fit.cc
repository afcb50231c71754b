// Model's training step under a PipelineStrategy (strata/parallel/pipeline_strategy.h): the model's layers cut into
// the strategy's stages, run as a ThreadPipeline with the model's own loss and optimizer, the metrics fed from the
// loss stage's predictions.
// Thread-safety: fit's driving thread; the metrics are updated from the loss stage's thread while the driving thread
// waits for the step.
#include <algorithm>

#include "strata/error.h"
#include "strata/parallel/pipeline.h"
#include "strata/parallel/pipeline_strategy.h"
#include "strata/train/model.h"

namespace strata {

void Model::pipelined_train_step(parallel::PipelineStrategy& strategy, const data::Element& batch) {
  STRATA_CHECK(batch.size() == 2, InvalidArgument,
               "fit under PipelineStrategy: model '" << name() << "' trains on elements (x, y); got one of "
                                                     << batch.size()
                                                     << " component(s) (sample weights are not "
                                                        "pipelined yet)");
  const Tensor& x = batch[0];
  const Tensor& y = batch[1];
  const PipelineKey key{strategy.id(), loss_.get(), optimizer_.get()};
  if (!pipeline_ || !(pipeline_key_ == key)) {
    STRATA_CHECK(dynamic_cast<const Sequential*>(this) != nullptr, InvalidArgument,
                 "fit under PipelineStrategy: model '" << name() << "' is a " << class_name()
                                                       << "; stages are cut from a Sequential model's layers");
    parallel::PipelineOptions options{.example_shape = Shape(x.shape().begin() + 1, x.shape().end())};
    options.replicas = strategy.replica_group();  // across workers: one pipeline replica each
    if (const distribute::CommunicationOptions* communication = strategy.replica_communication()) {
      options.bytes_per_pack = communication->bytes_per_pack;  // --bytes-per-pack, as for multi_worker_mirrored
      options.timeout = communication->timeout;                // --collective-timeout
    }
    if (strategy.options().recompute) {
      for (int s = 0; s < strategy.schedule().stages; ++s) options.recompute_stages.push_back(s);
    }
    options.on_predictions = [this](const Tensor& y_true, const Tensor& y_pred) {
      for (const auto& m : metrics_) m->update_state(y_true, y_pred, Tensor());
    };
    const Tensor micro_batch = x.slice(0, std::max<int64_t>(1, x.dim(0) / strategy.schedule().micro_batches));
    pipeline_ = std::make_shared<parallel::ThreadPipeline>(strategy.split(layers(), micro_batch), strategy.schedule(),
                                                           loss_, optimizer_, std::move(options));
    pipeline_key_ = key;
  }
  const double loss = pipeline_->train_step(x, y);
  strategy.record_step(pipeline_->last_bubble_fraction(), pipeline_->last_timings());
  const auto rows = static_cast<double>(y.dim(0));
  loss_tracker_->update(loss, rows);
}

}  // namespace strata
