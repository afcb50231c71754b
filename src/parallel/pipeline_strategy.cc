// PipelineStrategy (strata/parallel/pipeline_strategy.h): the options, the schedule they make, and variables on the
// one device. Thread-safety: one driving thread.
#include "strata/parallel/pipeline_strategy.h"

#include <algorithm>
#include <cstdio>

#include "strata/error.h"

namespace strata::parallel {

namespace {
// The schedule the options make; InvalidArgument for one that cannot run, or bad balance or bounds.
Schedule checked_schedule(const PipelineStrategyOptions& options) {
  Schedule schedule = make_schedule(options.schedule, options.stages, options.micro_batches, options.chunks);
  check(schedule);
  STRATA_CHECK(options.balance == "time" || options.balance == "parameters", InvalidArgument,
               "PipelineStrategy: balance '" << options.balance << "' is not time or parameters");
  STRATA_CHECK(options.bounds.empty() || static_cast<int>(options.bounds.size()) == schedule.virtual_stages() - 1,
               InvalidArgument,
               "PipelineStrategy: " << schedule.virtual_stages() << " virtual stages need "
                                    << schedule.virtual_stages() - 1 << " bounds, got " << options.bounds.size());
  return schedule;
}
}  // namespace

PipelineStrategy::PipelineStrategy(PipelineStrategyOptions options)
    : options_(std::move(options)), schedule_(checked_schedule(options_)) {}

PipelineStrategy::PipelineStrategy(PipelineStrategyOptions options, const cluster::TaskInfo& task,
                                   distribute::CommunicationOptions communication)
    // The options are checked before the workers connect: a bad one fails at once, not after the rendezvous.
    : WorkerGroupStrategy((checked_schedule(options), task), std::move(communication), "pipeline",
                          "PipelineStrategy"),
      options_(std::move(options)),
      schedule_(checked_schedule(options_)) {}

PipelineStrategy::~PipelineStrategy() = default;

comm::Communicator* PipelineStrategy::replica_group() const {
  return worker_group() ? &worker_group()->communicator() : nullptr;
}

const distribute::CommunicationOptions* PipelineStrategy::replica_communication() const {
  return worker_group() ? &communication_options() : nullptr;
}

std::string PipelineStrategy::backend() const { return worker_group() ? worker_group()->backend() : ""; }

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
  if (worker_group()) {  // every worker cuts where the chief does (measured times differ between processes)
    std::vector<int64_t> bounds;
    int64_t at = 0;
    for (size_t i = 0; i + 1 < pieces.size(); ++i) bounds.push_back(at += static_cast<int64_t>(pieces[i].size()));
    Tensor agreed = Tensor::from_vector(bounds);
    if (!bounds.empty()) broadcast_from_chief({agreed});
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
  if (worker_group()) out += ", a replica on each of " + std::to_string(num_workers()) + " workers (" + backend() + ")";
  return out;
}

}  // namespace strata::parallel
