// See shard_state.h. Thread-safety: every public method holds mu_ while it reads or writes the shard.
#include "ps/shard_state.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kernels/kernels.h"
#include "strata/error.h"

namespace strata::ps {
namespace {

// InvalidArgument with `message` as it is: the server sends it to its clients, as it always has (no location).
[[noreturn]] void invalid(const std::string& message) { throw_error(ErrorCode::kInvalidArgument, message); }

// `requested` as an int64 index tensor for kernels::gather / scatter_add; InvalidArgument naming the first row
// outside [0, rows), as `what` (e.g. "Pull emb/part_0").
Tensor row_indices(std::span<const int64_t> requested, int64_t rows, const std::string& what) {
  Tensor out = Tensor::empty({static_cast<int64_t>(requested.size())}, DType::kInt64);
  int64_t* at = out.data<int64_t>();
  for (const int64_t r : requested) {
    if (r < 0 || r >= rows) {
      invalid(what + ": row " + std::to_string(r) + " is outside [0, " + std::to_string(rows) + ")");
    }
    *at++ = r;
  }
  return out;
}

// Sets rows `rows` (int64, each in range) of `t` [R, ...] back to zero.
void zero_rows(Tensor& t, const Tensor& rows) {
  const int64_t width = t.numel() / t.dim(0);
  float* data = t.data<float>();
  const int64_t* r = rows.data<int64_t>();
  for (int64_t i = 0; i < rows.numel(); ++i) std::fill_n(data + r[i] * width, width, 0.0f);
}

}  // namespace

ShardState::ShardState(std::string name, const Tensor& initial, std::shared_ptr<optim::Optimizer> optimizer,
                       std::string optimizer_key, int64_t step_window)
    : name_(std::move(name)),
      shape_(initial.shape()),
      optimizer_key_(std::move(optimizer_key)),
      step_window_(step_window),
      var_(initial, /*trainable=*/true, name_),
      optimizer_(std::move(optimizer)) {
  STRATA_CHECK(optimizer_ != nullptr, InvalidArgument, "ps shard " << name_ << ": no optimizer");
  STRATA_CHECK(initial.rank() >= 1, InvalidArgument, "ps shard " << name_ << ": a shard has at least one axis");
  STRATA_CHECK(step_window_ >= 1, InvalidArgument,
               "ps shard " << name_ << ": step_window must be at least 1, got " << step_window_);
}

ShardState::PushResult ShardState::push(const Tensor& gradient, std::span<const int64_t> rows,
                                        const std::string& step_id, const SyncRound& round,
                                        double learning_rate) {
  const bool in_round = round.size > 0;
  if (round.size < 0 || (in_round && step_id.empty())) {
    invalid("Push " + name_ + ": a push of round " + std::to_string(round.id) +
            " needs a step id and a positive round size (got " + std::to_string(round.size) + ")");
  }
  if (!std::isfinite(learning_rate) || learning_rate < 0) {
    std::ostringstream rate;
    rate << learning_rate;
    invalid("Push " + name_ + ": learning rate " + rate.str() + " must be finite and >= 0 (0: the shard's own)");
  }
  std::lock_guard lock(mu_);
  PushResult result;
  if (taken(step_id, round.id)) {
    result.version = version_;
    return result;
  }
  Tensor grad = gradient;
  Tensor indices;
  if (!rows.empty()) {  // sparse: scatter the rows' gradient into a dense one (repeated rows add up)
    Shape want = shape_;
    want[0] = static_cast<int64_t>(rows.size());
    if (grad.shape() != want) {
      invalid("Push " + name_ + ": the gradient of " + std::to_string(rows.size()) + " rows is " +
              shape_str(grad.shape()) + ", wants " + shape_str(want));
    }
    indices = row_indices(rows, shape_[0], "Push " + name_);
    if (in_round) grad = kernels::scatter_add(indices, grad, shape_[0]);  // the round's sum keeps it
  } else if (grad.shape() != shape_) {
    invalid("Push " + name_ + ": the gradient is " + shape_str(grad.shape()) + ", the shard " + shape_str(shape_));
  }
  if (!in_round && indices.defined()) {
    if (!sparse_gradient_.defined()) sparse_gradient_ = Tensor::zeros(shape_);
    kernels::scatter_add_into(sparse_gradient_, indices, grad);
    apply(sparse_gradient_, {step_id}, learning_rate);
    zero_rows(sparse_gradient_, indices);
    result.applied = 1;
  } else if (!in_round) {
    apply(grad, {step_id}, learning_rate);
    result.applied = 1;
  } else {
    result.applied = add_to_round(round, step_id, std::move(grad), /*borrowed=*/rows.empty(), learning_rate);
  }
  result.taken = true;
  result.version = version_;
  return result;
}

int64_t ShardState::add_to_round(const SyncRound& round, const std::string& step, Tensor grad, bool borrowed,
                                 double learning_rate) {
  PendingRound& pending = rounds_[round.id];
  if (pending.size == 0) {
    pending.size = round.size;
    pending.learning_rate = learning_rate;
    pending.sum = borrowed ? grad.clone() : std::move(grad);  // a dense gradient is the caller's
  } else if (pending.size != round.size) {
    invalid("Push " + name_ + ": round " + std::to_string(round.id) + " has size " + std::to_string(pending.size) +
            " but step '" + step + "' says " + std::to_string(round.size) + " (pushes of one round must agree)");
  } else if (pending.learning_rate != learning_rate) {
    std::ostringstream rates;
    rates << pending.learning_rate << " but step '" << step << "' says " << learning_rate;
    invalid("Push " + name_ + ": round " + std::to_string(round.id) + " has learning rate " + rates.str() +
            " (pushes of one round must agree; 0: the shard's own)");
  } else {
    kernels::axpy_(pending.sum, 1.0f, grad);
  }
  pending.steps.insert(step);
  if (static_cast<int64_t>(pending.steps.size()) < pending.size) return 0;
  apply(kernels::affine(pending.sum, 1.0f / static_cast<float>(pending.size), 0.0f), pending.steps,
        pending.learning_rate);
  const int64_t applied = pending.size;
  rounds_.erase(round.id);
  return applied;
}

ShardState::Pulled ShardState::pull(std::span<const int64_t> rows) const {
  std::lock_guard lock(mu_);
  const Tensor& value = var_.value();
  Pulled out;
  out.value = rows.empty() ? value.clone() : kernels::gather(value, row_indices(rows, value.dim(0), "Pull " + name_));
  out.version = version_;
  return out;
}

void ShardState::save(const std::function<void(const Saved&)>& write) const {
  std::lock_guard lock(mu_);
  write(Saved{.value = var_.value(),
              .optimizer_state = optimizer_->state({var_}),
              .version = version_,
              .applied_steps = step_order_,
              .learning_rate = optimizer_->learning_rate()});
}

void ShardState::assign(const Tensor& value) {
  if (value.dtype() != DType::kFloat32 || value.shape() != shape_) {
    invalid("Assign " + name_ + ": the value is " + std::string(dtype_name(value.dtype())) + shape_str(value.shape()) +
            ", the shard float32" + shape_str(shape_));
  }
  std::lock_guard lock(mu_);
  var_.assign(value);
}

void ShardState::restore(int64_t version, const std::vector<std::string>& applied_steps,
                         const std::vector<std::pair<std::string, Tensor>>& optimizer_state) {
  std::lock_guard lock(mu_);
  optimizer_->load_state(optimizer_state, {var_});
  version_ = version;
  for (const std::string& step : applied_steps) remember(step);  // oldest first, as saved
}

int64_t ShardState::steps_remembered() const {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(applied_steps_.size());
}

int64_t ShardState::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

double ShardState::learning_rate() const {
  std::lock_guard lock(mu_);
  return optimizer_->learning_rate();
}

void ShardState::apply(const Tensor& gradient, const std::unordered_set<std::string>& steps, double learning_rate) {
  if (learning_rate > 0) optimizer_->set_learning_rate(static_cast<float>(learning_rate));
  optimizer_->apply_gradients({gradient}, {var_});
  ++version_;
  for (const std::string& step : steps) remember(step);
}

void ShardState::remember(const std::string& step) {
  if (step.empty() || !applied_steps_.insert(step).second) return;
  step_order_.push_back(step);
  while (static_cast<int64_t>(step_order_.size()) > step_window_) {
    applied_steps_.erase(step_order_.front());
    step_order_.pop_front();
  }
}

bool ShardState::taken(const std::string& step, int64_t round) const {
  if (step.empty()) return false;
  if (applied_steps_.count(step)) return true;
  const auto it = rounds_.find(round);
  return it != rounds_.end() && it->second.steps.count(step);
}

}  // namespace strata::ps
