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

Variable PipelineStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  return make_distributed_variable({initial_value}, options, id());
}

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
  layout_.clear();
  for (const StageLayers& piece : pieces) {
    layout_ += layout_.empty() ? "[" : " [";
    for (size_t i = 0; i < piece.size(); ++i) layout_ += (i ? " " : "") + piece[i]->name();
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
  return out + ", simulated bubble " + bound;
}

}  // namespace strata::parallel
