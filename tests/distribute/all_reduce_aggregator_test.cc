// AllReduceAggregator (distribute/all_reduce_aggregator.h): the collectives of a step carry the applier's
// (optimizer's) iterations() as their training step (Communicator::set_step), whether the step was announced
// (Optimizer::minimize's expect_apply) or not (tape + apply_gradients: tagged with the step after the last one
// applied).
#include "distribute/all_reduce_aggregator.h"

#include <gtest/gtest.h>

#include "forwarding_communicator.h"
#include "strata/comm/local.h"
#include "strata/distribute/strategies.h"
#include "strata/gradient_tape.h"
#include "strata/ops.h"

namespace strata::distribute::detail {
namespace {

// A group of one that notes the step each all_reduce was issued in.
class StepNotingGroup final : public test::ForwardingCommunicator {
 public:
  StepNotingGroup() : ForwardingCommunicator(comm::make_local_group(1)[0]) {}
  using ForwardingCommunicator::all_reduce;
  std::string backend() const override { return "step-noting"; }
  std::shared_ptr<comm::Work> all_reduce(std::vector<Tensor> tensors, comm::ReduceOp op) override {
    steps.push_back(step_);
    return inner()->all_reduce(std::move(tensors), op);
  }
  void set_step(int64_t step) override { step_ = step; }

  std::vector<int64_t> steps;

 private:
  int64_t step_ = -1;
};

// An optimizer that only counts its steps (optim is above distribute).
class StepCounter final : public GradientApplier {
 public:
  bool prepared(const std::vector<Variable>&) const override { return true; }
  void prepare(const std::vector<Variable>&) override {}
  void update(const std::vector<Tensor>&, const std::vector<Variable>&) override {}
  bool elementwise() const override { return true; }
  void update_summed(const Variable&, const std::vector<const float*>&) override {}
  void finish() override { ++steps_; }
  int64_t iterations() const override { return steps_; }

 private:
  int64_t steps_ = 0;
};

TEST(AllReduceAggregatorTest, EachStepsCollectivesCarryTheOptimizersIterations) {
  auto strategy = MirroredStrategy::cpu_replicas(1);
  Variable w;
  {
    auto scope = strategy->scope();
    w = make_variable(Tensor::full({4}, 1.0), {.name = "w"});
  }
  StepNotingGroup group;
  AllReduceAggregator aggregator(*strategy, 0, group, 1 << 20, [](const Variable&) {});
  StepCounter optimizer;
  strategy->run([&] {
    ScopedGradientAggregator installed(&aggregator);
    auto step = [&](bool announced) {
      if (announced) aggregator.expect_apply(optimizer, {w});
      GradientTape tape;
      const auto grads = tape.gradient(sum(affine(w, 2.0f)), {w});
      aggregator.apply_gradients(grads, {w}, optimizer);
    };
    step(false);  // no applier has said a step yet: untagged
    step(true);
    step(true);
    step(false);
  });
  EXPECT_EQ(optimizer.iterations(), 4);
  EXPECT_EQ(group.steps, (std::vector<int64_t>{-1, 1, 2, 3}));
}

}  // namespace
}  // namespace strata::distribute::detail
