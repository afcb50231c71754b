// The job's distribution strategy and learning-rate scaling (see distribution.h).
#include "cli/distribution.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "strata/distribute/strategies.h"
#include "strata/error.h"
#include "strata/threading.h"

namespace strata::cli {

namespace {

void check_choice(const std::string& value, const std::vector<std::string>& choices, const std::string& where,
                  const char* what) {
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return;
  std::ostringstream list;
  for (const auto& c : choices) list << (list.tellp() > 0 ? ", " : "") << c;
  STRATA_THROW(InvalidArgument, where << ": unknown " << what << " '" << value << "'; choose one of " << list.str());
}

std::string format_rate(double lr) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", lr);
  return buf;
}

}  // namespace

void check_strategy_name(const std::string& name, const std::string& where) {
  check_choice(name, {"one_device", "mirrored", "central_storage"}, where, "strategy");
}

void check_cross_device_ops(const std::string& name, const std::string& where) {
  check_choice(name, {"ring", "tree", "reduction_to_one_device"}, where, "cross-device ops");
}

void check_lr_scaling(const std::string& rule, const std::string& where) {
  check_choice(rule, {"none", "linear"}, where, "lr_scaling rule");
}

StrategySpec resolve_strategy(const StrategySpec& from_job, const StrategyFlags& flags) {
  StrategySpec spec = from_job;
  if (!flags.strategy.empty()) {
    check_strategy_name(flags.strategy, "--strategy");
    if (flags.strategy != from_job.name) {
      // The file's replicas / cross_device_ops were chosen for its own strategy.
      spec = StrategySpec{.name = flags.strategy};
      if (flags.strategy == "mirrored" || flags.strategy == "central_storage") spec.replicas = from_job.replicas;
      if (flags.strategy == "mirrored") spec.cross_device_ops = from_job.cross_device_ops;
    }
  }
  if (flags.replicas != 0) {
    STRATA_CHECK(flags.replicas > 0, InvalidArgument, "--replicas: must be positive, got " << flags.replicas);
    STRATA_CHECK(spec.name != "one_device" || flags.replicas == 1, InvalidArgument,
                 "--replicas " << flags.replicas
                               << ": one_device has one replica; use --strategy mirrored or "
                                  "central_storage for more");
    spec.replicas = flags.replicas;
  }
  if (!flags.cross_device_ops.empty()) {
    check_cross_device_ops(flags.cross_device_ops, "--cross-device-ops");
    STRATA_CHECK(spec.name == "mirrored", InvalidArgument,
                 "--cross-device-ops " << flags.cross_device_ops << ": only the mirrored strategy all-reduces "
                                       << "gradients (this job's strategy is " << spec.name << ")");
    spec.cross_device_ops = flags.cross_device_ops;
  }
  return spec;
}

std::unique_ptr<distribute::Strategy> make_job_strategy(const StrategySpec& spec) {
  check_strategy_name(spec.name, "strategy");
  int replicas = spec.replicas;
  if (replicas <= 0) replicas = spec.name == "one_device" ? 1 : std::max(1, num_threads());
  return distribute::make_strategy(spec.name, replicas, spec.cross_device_ops);
}

std::string strategy_line(const distribute::Strategy& strategy, int64_t global_batch) {
  const int n = strategy.num_replicas_in_sync(), threads = strategy.threads_per_replica();
  std::ostringstream out;
  out << "strategy: " << strategy.name() << ", " << n << (n == 1 ? " replica (" : " replicas (") << threads
      << (threads == 1 ? " thread" : " threads") << (n == 1 ? ")" : " each)");
  if (const auto* mirrored = dynamic_cast<const distribute::MirroredStrategy*>(&strategy); mirrored && n > 1) {
    out << ", " << comm::to_string(mirrored->cross_device_ops().algorithm) << " all-reduce";
  }
  out << ", global batch " << global_batch;
  if (n > 1) {
    const int64_t per = (global_batch + n - 1) / n;
    out << " (" << per << (global_batch % n == 0 ? "" : " or fewer") << " per replica)";
  }
  return out.str();
}

int64_t warmup_steps(const LrScalingSpec& spec, int64_t steps_per_epoch) {
  if (spec.warmup_epochs <= 0 || steps_per_epoch <= 0) return 0;
  return static_cast<int64_t>(std::ceil(spec.warmup_epochs * static_cast<double>(steps_per_epoch) - 1e-9));
}

optim::LearningRate scaled_learning_rate(const LrScalingSpec& spec, float base_lr, int64_t global_batch,
                                         int64_t steps_per_epoch) {
  check_lr_scaling(spec.rule, "lr_scaling");
  if (spec.rule == "none") return base_lr;
  const float scaled = optim::scale_lr(base_lr, global_batch, spec.base_batch_size);
  const int64_t warmup = warmup_steps(spec, steps_per_epoch);
  if (warmup == 0) return scaled;
  return optim::linear_warmup(optim::constant(scaled), warmup, base_lr);
}

std::string learning_rate_line(const LrScalingSpec& spec, float base_lr, int64_t global_batch,
                               int64_t steps_per_epoch) {
  if (spec.rule == "none") return "";
  const float scaled = optim::scale_lr(base_lr, global_batch, spec.base_batch_size);
  std::ostringstream out;
  out << "learning rate: " << format_rate(base_lr) << " -> " << format_rate(scaled) << " (linear scaling: global batch "
      << global_batch << " / base " << spec.base_batch_size << ")";
  const int64_t warmup = warmup_steps(spec, steps_per_epoch);
  if (warmup > 0) {
    out << ", warmup " << format_rate(spec.warmup_epochs) << (spec.warmup_epochs == 1 ? " epoch (" : " epochs (")
        << warmup << " steps) from " << format_rate(base_lr);
  }
  return out.str();
}

}  // namespace strata::cli
