// TensorParallelStrategy: a Sequential model's training steps run on `tp` ranks (threads of this process, a local
// communicator group, strata/comm/local.h), each holding its slice of the split layers:
//   - nn::TransformerEncoder -> TensorParallelTransformerEncoder (heads, and the MLP's two matmuls in Megatron's
//     column/row pair; layer norms and residuals whole);
//   - nn::MultiHeadAttention (called on one input, self-attention) -> TensorParallelMultiHeadAttention;
//   - two consecutive nn::Dense, the first with an elementwise activation -> ColumnParallelDense (gather_output
//     false) then RowParallelDense (input_is_parallel);
//   - every other layer runs whole on every rank (the same layer object, each rank with its own tape).
// Evaluate and predict run the whole model on the calling thread, as under OneDeviceStrategy.
//
//   parallel::TensorParallelStrategy strategy({.tp = 2});
//   auto scope = strategy.scope();
//   Sequential model({...TransformerEncoder(128, 4)...});
//   model.compile(...);
//   model.fit(train, {.epochs = 5});   // each step: 2 ranks, each with half the heads and half the MLP
//
// The model's own variables stay the master copy: each step loads the ranks' slices from them, the ranks run the
// forward and backward (2 all-reduces forward and 2 backward per encoder block), the ranks' gradients are joined into
// the whole weights' gradients (slices concatenated; a replicated weight's from rank 0, the same on every rank), and
// the model's compiled optimizer applies them to the model's variables. So the weights after each step are the
// unsplit model's to float rounding, and checkpoints, `strata export` and evaluate see the unsplit model. (The update
// itself is not split: the optimizer's state is whole, on the driving thread.)
//
// Refused (InvalidArgument, naming the layer): a model that is not a plain stack of layers; no layer to split; a
// split layer whose heads or MLP width is not a multiple of tp; weight regularizers; BatchNormalization (its moving
// statistics would be updated by every rank); a batch with sample weights.
//
// Thread-safety: as every strategy, driven by one thread; the ranks are threads of each step.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "strata/distribute/strategy.h"

namespace strata::parallel {

struct TensorParallelStrategyOptions {
  int tp = 2;  // ranks the split layers are split over (threads of this process)
};

class TensorParallelStrategy final : public distribute::Strategy {
 public:
  // InvalidArgument for tp < 1.
  explicit TensorParallelStrategy(TensorParallelStrategyOptions options = {});
  ~TensorParallelStrategy() override;
  std::string name() const override { return "TensorParallelStrategy"; }
  Variable create_variable(const Tensor& initial_value, const VariableOptions& options) override;
  // The program's training step on `batch` (x, y) over the ranks: the ranks' layers are made at the first step and
  // kept while the program, its loss and its optimizer stay the same.
  std::optional<double> run_train_step(distribute::TrainingProgram& program, const data::Element& batch) override;

  const TensorParallelStrategyOptions& options() const { return options_; }
  // The last plan, one entry per model layer: "reshape conv1d position_embedding transformer_encoder[split] ...".
  const std::string& layout() const { return layout_; }
  // "TensorParallelStrategy, 2 ranks (threads of this process)".
  std::string describe() const;

 private:
  struct Plan;
  TensorParallelStrategyOptions options_;
  std::string layout_;
  std::unique_ptr<Plan> plan_;
};

}  // namespace strata::parallel
