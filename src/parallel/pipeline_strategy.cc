// PipelineStrategy (strata/parallel/pipeline_strategy.h): the options, the schedule they make, and variables on the
// one device. Thread-safety: one driving thread.
#include "strata/parallel/pipeline_strategy.h"

#include <algorithm>
#include <cstdio>

#include "strata/error.h"

namespace strata::parallel {

PipelineStrategy::PipelineStrategy(PipelineStrategyOptions options)
    : Strategy({"/cpu:0"}),
      options_(std::move(options)),
      schedule_(make_schedule(options_.schedule, options_.stages, options_.micro_batches, options_.chunks)) {
  check(schedule_);
  STRATA_CHECK(options_.balance == "time" || options_.balance == "parameters", InvalidArgument,
               "PipelineStrategy: balance '" << options_.balance << "' is not time or parameters");
  STRATA_CHECK(options_.bounds.empty() || static_cast<int>(options_.bounds.size()) == schedule_.virtual_stages() - 1,
               InvalidArgument,
               "PipelineStrategy: " << schedule_.virtual_stages() << " virtual stages need "
                                    << schedule_.virtual_stages() - 1 << " bounds, got " << options_.bounds.size());
}

PipelineStrategy::PipelineStrategy(PipelineStrategyOptions options, const cluster::TaskInfo& task,
                                   distribute::CommunicationOptions communication)
    : PipelineStrategy(std::move(options)) {
  if (task.num_workers > 1) {
    workers_ = std::make_unique<distribute::MultiWorkerMirroredStrategy>(task, std::move(communication), 1);
  }
}

PipelineStrategy::~PipelineStrategy() = default;

Variable PipelineStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  if (!workers_) return make_distributed_variable({initial_value}, options, id());
  Tensor value = initial_value.clone();
  workers_->broadcast_from_chief({value});
  return make_distributed_variable({value}, options, id());
}

int PipelineStrategy::num_workers() const { return workers_ ? workers_->num_workers() : 1; }
int PipelineStrategy::worker_index() const { return workers_ ? workers_->worker_index() : 0; }

std::vector<double> PipelineStrategy::sum_across_workers(const std::vector<double>& values) const {
  return workers_ ? workers_->sum_across_workers(values) : values;
}

void PipelineStrategy::broadcast_from_chief(const std::vector<Tensor>& tensors) const {
  if (workers_) workers_->broadcast_from_chief(tensors);
}

std::vector<std::string> PipelineStrategy::all_gather_across_workers(const std::string& bytes) const {
  return workers_ ? workers_->all_gather_across_workers(bytes) : std::vector<std::string>{bytes};
}

comm::Communicator* PipelineStrategy::replica_group() const { return workers_ ? &workers_->communicator(0) : nullptr; }

const distribute::CommunicationOptions* PipelineStrategy::replica_communication() const {
  return workers_ ? &workers_->communication_options() : nullptr;
}

std::string PipelineStrategy::backend() const { return workers_ ? workers_->backend() : ""; }

std::vector<StageLayers> PipelineStrategy::split(const std::vector<std::shared_ptr<nn::Layer>>& layers,
                                                 const Tensor& micro_batch) {
  std::vector<StageLayers> pieces;
  if (!options_.bounds.empty()) {
    pieces = split_at(layers, options_.bounds);
  } else if (options_.balance == "parameters") {
    pieces = split_by_parameters(layers, schedule_.virtual_stages());
  } else {
    pieces = split_by_time(layers, schedule_.virtual_stages(), micro_batch);
  }
  if (workers_) {  // every worker cuts where the chief does (measured times differ between processes)
    std::vector<int64_t> bounds;
    int64_t at = 0;
    for (size_t i = 0; i + 1 < pieces.size(); ++i) bounds.push_back(at += static_cast<int64_t>(pieces[i].size()));
    Tensor agreed = Tensor::from_vector(bounds);
    if (!bounds.empty()) workers_->broadcast_from_chief({agreed});
    const std::vector<int64_t> chief = agreed.to_vector<int64_t>();
    pieces = split_at(layers, std::vector<int>(chief.begin(), chief.end()));
  }
  layout_.clear();
  for (const StageLayers& piece : pieces) {
    layout_ += layout_.empty() ? "[" : " [";
    for (size_t i = 0; i < piece.size(); ++i) {
      if (i > 0) layout_ += ' ';
      layout_ += piece[i]->name();
    }
    layout_ += "]";
  }
  return pieces;
}

void PipelineStrategy::record_step(double bubble_fraction, const std::vector<StageTiming>& timings) {
  ++measured_.steps;
  measured_.bubble_fraction_sum += bubble_fraction;
  measured_.peak_activations.resize(timings.size(), 0);
  for (size_t i = 0; i < timings.size(); ++i) {
    measured_.peak_activations[i] = std::max(measured_.peak_activations[i], timings[i].peak_activations);
  }
}

std::string PipelineStrategy::describe() const {
  char bound[64];
  std::snprintf(bound, sizeof(bound), "%.1f%%", 100.0 * simulate(schedule_).bubble_fraction);
  std::string out = "PipelineStrategy, " + std::to_string(schedule_.stages) + " stages, " +
                    std::to_string(schedule_.micro_batches) + " micro-batches, schedule " + schedule_.name;
  if (schedule_.chunks > 1) out += " (" + std::to_string(schedule_.chunks) + " chunks per stage)";
  if (options_.recompute) out += ", activations recomputed";
  out += std::string(", simulated bubble ") + bound;
  if (workers_) out += ", a replica on each of " + std::to_string(num_workers()) + " workers (" + backend() + ")";
  return out;
}

}  // namespace strata::parallel
