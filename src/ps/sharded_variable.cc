// ShardedVariable (strata/ps/sharded_variable.h): splitting, locating rows, and asking the shards in parallel.
// Thread-safety: immutable after construction; each call asks its shards on threads of its own.
#include "strata/ps/sharded_variable.h"

#include <algorithm>
#include <cstring>
#include <future>

#include "strata/error.h"

namespace strata::ps {

namespace {
// Runs fn(shard) for every shard in `shards` at once and waits; rethrows the first error.
template <class Fn>
void on_shards(const std::vector<int64_t>& shards, Fn fn) {
  std::vector<std::future<void>> pending;
  pending.reserve(shards.size());
  for (int64_t s : shards) pending.push_back(std::async(std::launch::async, [&fn, s] { fn(s); }));
  std::exception_ptr first;
  for (auto& p : pending) {
    try {
      p.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

std::vector<int64_t> all_shards(int64_t n) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = i;
  return out;
}

int64_t row_width(const Shape& shape) { return shape_numel(shape) / shape[0]; }
}  // namespace

ShardedVariable::ShardedVariable(std::string name, const Shape& shape, DType dtype, const Partitioner& partitioner,
                                 std::vector<std::shared_ptr<ParameterServerClient>> servers)
    : name_(std::move(name)), shape_(shape), servers_(std::move(servers)) {
  STRATA_CHECK(!servers_.empty(), InvalidArgument, "ShardedVariable " << name_ << ": no parameter servers");
  STRATA_CHECK(dtype == DType::kFloat32 && !shape_.empty(), InvalidArgument,
               "ShardedVariable " << name_ << ": wants a float32 value of rank >= 1");
  rows_ = ps::shard_rows(shape_[0], partitioner.num_shards(shape_, dtype));
  int64_t first = 0;
  for (int64_t r : rows_) {
    first_.push_back(first);
    first += r;
  }
}

ShardedVariable::ShardedVariable(std::string name, const Tensor& initial, const Partitioner& partitioner,
                                 std::vector<std::shared_ptr<ParameterServerClient>> servers,
                                 const OptimizerSpec& optimizer)
    : ShardedVariable(std::move(name), initial.defined() ? initial.shape() : Shape{},
                      initial.defined() ? initial.dtype() : DType::kFloat32, partitioner, std::move(servers)) {
  const Tensor value = initial.clone();
  on_shards(all_shards(num_shards()), [&](int64_t s) {
    const size_t i = static_cast<size_t>(s);
    servers_[static_cast<size_t>(shard_server(s))]->create(shard_name(s), value.slice(first_[i], first_[i] + rows_[i]),
                                                          optimizer);
  });
}

void ShardedVariable::replace(const Tensor& value, const OptimizerSpec& optimizer) const {
  STRATA_CHECK(value.defined() && value.shape() == shape_, InvalidArgument,
               "ShardedVariable " << name_ << ": replace needs a value of its shape " << shape_str(shape_));
  const Tensor copy = value.clone();
  on_shards(all_shards(num_shards()), [&](int64_t s) {
    const size_t i = static_cast<size_t>(s);
    servers_[static_cast<size_t>(shard_server(s))]->create(shard_name(s), copy.slice(first_[i], first_[i] + rows_[i]),
                                                          optimizer, /*replace=*/true);
  });
}

void ShardedVariable::assign(const Tensor& value, const OptimizerSpec& optimizer) const {
  STRATA_CHECK(value.defined() && value.dtype() == DType::kFloat32 && value.shape() == shape_, InvalidArgument,
               "ShardedVariable " << name_ << ": assign needs a float32 value of its shape " << shape_str(shape_)
                                  << ", got " << (value.defined() ? value.shape_str() : std::string("undefined")));
  const Tensor copy = value.clone();
  on_shards(all_shards(num_shards()), [&](int64_t s) {
    const size_t i = static_cast<size_t>(s);
    servers_[static_cast<size_t>(shard_server(s))]->assign(shard_name(s), copy.slice(first_[i], first_[i] + rows_[i]),
                                                          optimizer);
  });
}

ShardedVariable ShardedVariable::existing(std::string name, const Shape& shape, const Partitioner& partitioner,
                                          std::vector<std::shared_ptr<ParameterServerClient>> servers) {
  return ShardedVariable(std::move(name), shape, DType::kFloat32, partitioner, std::move(servers));
}

std::string ShardedVariable::shard_name(int64_t shard) const { return name_ + "/part_" + std::to_string(shard); }

int64_t ShardedVariable::shard_server(int64_t shard) const {
  return shard_task(shard, static_cast<int64_t>(servers_.size()));
}

std::pair<int64_t, int64_t> ShardedVariable::locate(int64_t row) const {
  STRATA_CHECK(row >= 0 && row < shape_[0], InvalidArgument,
               "ShardedVariable " << name_ << ": row " << row << " is outside [0, " << shape_[0] << ")");
  const auto it = std::upper_bound(first_.begin(), first_.end(), row);
  const int64_t shard = static_cast<int64_t>(it - first_.begin()) - 1;
  return {shard, row - first_[static_cast<size_t>(shard)]};
}

ShardedVariable::ByShard ShardedVariable::group(const std::vector<int64_t>& rows) const {
  ByShard g;
  g.positions.resize(rows_.size());
  g.local.resize(rows_.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto [shard, row] = locate(rows[k]);
    g.positions[static_cast<size_t>(shard)].push_back(k);
    g.local[static_cast<size_t>(shard)].push_back(row);
  }
  for (size_t s = 0; s < rows_.size(); ++s)
    if (!g.local[s].empty()) g.touched.push_back(static_cast<int64_t>(s));
  return g;
}

Tensor ShardedVariable::pull() const {
  Tensor out = Tensor::empty(shape_);
  const int64_t width = row_width(shape_);
  on_shards(all_shards(num_shards()), [&](int64_t s) {
    const size_t i = static_cast<size_t>(s);
    const Tensor part = servers_[static_cast<size_t>(shard_server(s))]->pull(shard_name(s));
    STRATA_CHECK(part.numel() == rows_[i] * width, DataCorrupt,
                 "ShardedVariable " << name_ << ": shard " << s << " came back as " << part.shape_str());
    std::memcpy(out.data<float>() + first_[i] * width, part.data<float>(), part.nbytes());
  });
  return out;
}

Tensor ShardedVariable::lookup(const std::vector<int64_t>& rows) const {
  const int64_t width = row_width(shape_);
  Shape shape = shape_;
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(shape);
  const ByShard g = group(rows);
  on_shards(g.touched, [&](int64_t s) {
    const size_t i = static_cast<size_t>(s);
    const Tensor part = servers_[static_cast<size_t>(shard_server(s))]->pull_rows(shard_name(s), g.local[i]);
    STRATA_CHECK(part.numel() == static_cast<int64_t>(g.local[i].size()) * width, DataCorrupt,
                 "ShardedVariable " << name_ << ": " << g.local[i].size() << " rows of shard " << s << " came back as "
                                    << part.shape_str() << ", rows of " << width << " values wanted");
    for (size_t j = 0; j < g.positions[i].size(); ++j) {
      std::memcpy(out.data<float>() + g.positions[i][j] * width, part.data<float>() + j * width, width * sizeof(float));
    }
  });
  return out;
}

void ShardedVariable::push(const Tensor& gradient, const std::string& step_id, const SyncRound& round,
                           double learning_rate) const {
  STRATA_CHECK(gradient.defined() && gradient.shape() == shape_, InvalidArgument,
               "ShardedVariable " << name_ << ": the gradient is "
                                  << (gradient.defined() ? gradient.shape_str() : std::string("undefined"))
                                  << ", the variable " << shape_str(shape_));
  on_shards(all_shards(num_shards()), [&](int64_t s) {
    const size_t i = static_cast<size_t>(s);
    servers_[static_cast<size_t>(shard_server(s))]->push(shard_name(s), gradient.slice(first_[i], first_[i] + rows_[i]),
                                                         step_id, round, learning_rate);
  });
}

void ShardedVariable::push_rows(const std::vector<int64_t>& rows, const Tensor& gradient, const std::string& step_id,
                                const SyncRound& round, double learning_rate) const {
  Shape want = shape_;
  want[0] = static_cast<int64_t>(rows.size());
  STRATA_CHECK(gradient.defined() && gradient.shape() == want, InvalidArgument,
               "ShardedVariable " << name_ << ": the gradient of " << rows.size() << " rows is "
                                  << (gradient.defined() ? gradient.shape_str() : std::string("undefined"))
                                  << ", wants " << shape_str(want));
  const int64_t width = row_width(shape_);
  const ByShard g = group(rows);
  // A round is complete on a shard only once every step of it pushed there: a shard holding none of the rows gets
  // a zero gradient of its row 0 (no change of its own, but its part in the round's mean).
  on_shards(round.defined() ? all_shards(num_shards()) : g.touched, [&](int64_t s) {
    const size_t i = static_cast<size_t>(s);
    const bool none = g.local[i].empty();
    Shape part_shape = shape_;
    part_shape[0] = none ? 1 : static_cast<int64_t>(g.local[i].size());
    Tensor part = none ? Tensor::zeros(part_shape) : Tensor::empty(part_shape);
    for (size_t j = 0; j < g.positions[i].size(); ++j) {
      std::memcpy(part.data<float>() + j * width, gradient.data<float>() + g.positions[i][j] * width,
                  width * sizeof(float));
    }
    servers_[static_cast<size_t>(shard_server(s))]->push_rows(
        shard_name(s), none ? std::vector<int64_t>{0} : g.local[i], part, step_id, round, learning_rate);
  });
}

std::vector<Tensor> pull_all(const std::vector<ShardedVariable>& variables) {
  std::vector<Tensor> out(variables.size());
  const auto n = static_cast<int64_t>(variables.size());
  on_shards(all_shards(n), [&](int64_t i) { out[static_cast<size_t>(i)] = variables[static_cast<size_t>(i)].pull(); });
  return out;
}

void push_all(const std::vector<ShardedVariable>& variables, const std::vector<Tensor>& gradients,
              const std::string& step_id, const SyncRound& round, double learning_rate) {
  STRATA_CHECK(variables.size() == gradients.size(), InvalidArgument,
               "push_all: " << gradients.size() << " gradients for " << variables.size() << " variables");
  const auto n = static_cast<int64_t>(variables.size());
  on_shards(all_shards(n), [&](int64_t i) {
    variables[static_cast<size_t>(i)].push(gradients[static_cast<size_t>(i)], step_id, round, learning_rate);
  });
}

}  // namespace strata::ps
