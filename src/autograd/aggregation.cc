// The per-thread gradient aggregator a strategy installs on its replica threads (see strata/aggregation.h).
// Thread-safety: the installed pointer is per thread.
#include "strata/aggregation.h"

namespace strata {

namespace {
thread_local GradientAggregator* t_aggregator = nullptr;
}  // namespace

GradientApplier::~GradientApplier() = default;
int64_t GradientApplier::iterations() const { return -1; }
GradientAggregator::~GradientAggregator() = default;
void GradientAggregator::expect_apply(GradientApplier&, const std::vector<Variable>&) {}
void GradientAggregator::begin_gradients(const std::vector<Variable>&) {}
void GradientAggregator::gradient_ready(size_t, const Tensor&) {}
void GradientAggregator::end_gradients(const std::vector<Tensor>&) {}

GradientAggregator* current_gradient_aggregator() { return t_aggregator; }

ScopedGradientAggregator::ScopedGradientAggregator(GradientAggregator* aggregator) : previous_(t_aggregator) {
  t_aggregator = aggregator;
}
ScopedGradientAggregator::~ScopedGradientAggregator() { t_aggregator = previous_; }

}  // namespace strata
