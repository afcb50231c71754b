// GradientReducer (gradient_reducer.h): bucket planning, packing gradients as backward reports them, issuing
// each full bucket's all-reduce on the communicator, and reading the sums back, in buckets on the replica's device.
// Thread-safety: one replica thread per reducer.
#include "distribute/gradient_reducer.h"

#include <algorithm>
#include <cstring>

namespace strata::distribute::detail {

namespace {
// The only code that touches a bucket's bytes: through the pointer on the host; on a GPU by copies and fills queued on
// the device's stream (so they are ordered with the kernels that made the gradients and with the all-reduce), and
// reads through a copy to the host.
void put(Tensor& bucket, int64_t at, float value) {
  if (bucket.device().is_cpu()) {
    bucket.data<float>()[at] = value;
  } else {
    bucket.slice(at, at + 1).fill_(value);
  }
}

float get(const Tensor& bucket, int64_t at) {
  if (bucket.device().is_cpu()) return bucket.data<float>()[at];
  return bucket.slice(at, at + 1).item<float>();
}

void put_all(Tensor& bucket, int64_t at, const std::vector<float>& values) {
  const auto n = static_cast<int64_t>(values.size());
  if (bucket.device().is_cpu()) {
    std::copy(values.begin(), values.end(), bucket.data<float>() + at);
  } else {
    bucket.slice(at, at + n).copy_(Tensor::from_vector(values, Shape{n}));
  }
}

std::vector<float> get_all(const Tensor& bucket, int64_t at, int64_t n) {
  if (bucket.device().is_cpu()) return {bucket.data<float>() + at, bucket.data<float>() + at + n};
  return bucket.slice(at, at + n).to_vector<float>();
}

void pack(Tensor& bucket, int64_t at, const Tensor& grad) {
  const int64_t n = grad.numel();
  if (bucket.device().is_cpu()) {
    std::memcpy(bucket.data<float>() + at, grad.data<float>(), static_cast<size_t>(n) * sizeof(float));
  } else {
    bucket.slice(at, at + n).copy_(grad.reshape({n}));
  }
}

void zero(Tensor& bucket, int64_t at, int64_t n) {
  if (bucket.device().is_cpu()) {
    std::fill(bucket.data<float>() + at, bucket.data<float>() + at + n, 0.0f);
  } else {
    bucket.slice(at, at + n).fill_(0.0);
  }
}
}  // namespace

std::vector<uint64_t> ids_of(const std::vector<Variable>& vars) {
  std::vector<uint64_t> ids;
  ids.reserve(vars.size());
  for (const Variable& v : vars) ids.push_back(v.id());
  return ids;
}

// A bucket is [gradients of its members | one has-a-gradient flag per member | the vote], float32; the last one
// [... | flags | side values' hi parts | their lo parts | the vote].
struct GradientReducer::Plan {
  std::vector<int> bucket_of;  // per source: its bucket, or -1 (not reduced)
  std::vector<int64_t> offset, numel;
  std::vector<int> flag_of;  // per source: its flag's index in its bucket
  size_t side = 0;           // side values carried in the last bucket
  int64_t side_at = 0;       // where their hi parts start in it
  std::vector<std::vector<size_t>> members;
  std::vector<Tensor> buckets;
  // This call.
  std::vector<int> pending;  // per bucket: members not yet added
  size_t next_issue = 0;
  std::vector<std::shared_ptr<comm::Work>> works;
  std::vector<const void*> added;  // per source: the added gradient's data (nullptr: undefined), for matches()
};

GradientReducer::GradientReducer(comm::Communicator& comm, std::string owner, int64_t bytes_per_pack, Filter takes,
                                 comm::Compression compression, std::chrono::milliseconds timeout, Device device)
    : comm_(comm),
      owner_(std::move(owner)),
      bytes_per_pack_(bytes_per_pack),
      takes_(std::move(takes)),
      all_reduce_options_{.op = comm::ReduceOp::kSum, .timeout = timeout, .compression = compression},
      device_(device) {
  STRATA_CHECK(bytes_per_pack_ > 0, InvalidArgument, owner_ << ": bytes_per_pack must be > 0, got " << bytes_per_pack_);
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::make_plan(Plan& p, const std::vector<Variable>& sources, size_t side) const {
  const size_t n = sources.size();
  p.bucket_of.assign(n, -1);
  p.offset.assign(n, 0);
  p.numel.assign(n, 0);
  p.flag_of.assign(n, 0);
  const int64_t cap = std::max<int64_t>(bytes_per_pack_ / static_cast<int64_t>(sizeof(float)), 1);
  std::vector<int64_t> filled;
  for (size_t k = n; k-- > 0;) {  // backward produces the last layers' gradients first
    const Variable& v = sources[k];
    if (!v.defined() || !takes_(v)) continue;
    const int64_t numel = v.component(0).numel();
    if (filled.empty() || (filled.back() > 0 && filled.back() + numel > cap)) {
      filled.push_back(0);
      p.members.emplace_back();
    }
    p.bucket_of[k] = static_cast<int>(filled.size()) - 1;
    p.offset[k] = filled.back();
    p.numel[k] = numel;
    filled.back() += numel;
    p.members.back().push_back(k);
  }
  if (filled.empty() && side > 0) {  // nothing to reduce, but values to sum: a bucket of their own
    filled.push_back(0);
    p.members.emplace_back();
  }
  p.side = side;
  for (size_t b = 0; b < filled.size(); ++b) {
    for (size_t j = 0; j < p.members[b].size(); ++j) p.flag_of[p.members[b][j]] = static_cast<int>(filled[b] + j);
    const int64_t flags_end = filled[b] + static_cast<int64_t>(p.members[b].size());
    const int64_t extra = b + 1 == filled.size() ? 2 * static_cast<int64_t>(side) : 0;
    if (extra > 0) p.side_at = flags_end;
    p.buckets.push_back(Tensor::empty({flags_end + extra + 1}, DType::kFloat32, device_));
  }
}

void GradientReducer::begin(const std::vector<Variable>& sources, float vote, const std::vector<double>& side) {
  STRATA_CHECK(side.empty() || !compressed(), InvalidArgument,
               owner_ << ": side values cannot ride in compressed buckets (bfloat16 would round them)");
  std::vector<uint64_t> ids = ids_of(sources);
  ids.push_back(side.size());  // a plan per side count: the last bucket has room for them
  auto [it, inserted] = plans_.try_emplace(std::move(ids));
  if (inserted) {
    it->second = std::make_unique<Plan>();
    make_plan(*it->second, sources, side.size());
  }
  Plan& p = *it->second;
  for (const auto& work : p.works) {  // the last call of this plan may still be reading its buckets
    if (work) work->wait();
  }
  p.pending.resize(p.members.size());
  for (size_t b = 0; b < p.members.size(); ++b) {
    p.pending[b] = static_cast<int>(p.members[b].size());
    put(p.buckets[b], p.buckets[b].numel() - 1, vote);
  }
  if (!side.empty()) {
    std::vector<float> parts(2 * side.size());
    for (size_t i = 0; i < side.size(); ++i) {
      const float hi = static_cast<float>(side[i]);
      parts[i] = hi;
      parts[side.size() + i] = static_cast<float>(side[i] - static_cast<double>(hi));
    }
    put_all(p.buckets.back(), p.side_at, parts);
  }
  p.next_issue = 0;
  p.works.assign(p.buckets.size(), nullptr);
  p.added.assign(sources.size(), nullptr);
  call_ = &p;
  ended_ = false;
  issue_ready(p);  // a bucket without members (side values alone) is full already
}

void GradientReducer::issue_ready(Plan& p) {
  while (p.next_issue < p.buckets.size() && p.pending[p.next_issue] == 0) {
    p.works[p.next_issue] = comm_.all_reduce({p.buckets[p.next_issue]}, all_reduce_options_);
    ++p.next_issue;
  }
}

void GradientReducer::add(size_t index, const Tensor& grad) {
  STRATA_CHECK(call_ != nullptr && !ended_, Error, owner_ << ": a gradient was reported outside a gradient call");
  Plan& p = *call_;
  STRATA_CHECK(index < p.bucket_of.size(), Error,
               owner_ << ": gradient " << index << " of a call with " << p.bucket_of.size() << " sources");
  const int b = p.bucket_of[index];
  if (b < 0) return;
  const int64_t n = p.numel[index];
  Tensor& bucket = p.buckets[static_cast<size_t>(b)];
  if (grad.defined()) {
    STRATA_CHECK(grad.dtype() == DType::kFloat32 && grad.numel() == n, InvalidArgument,
                 owner_ << ": gradient " << index << " is " << dtype_name(grad.dtype()) << grad.shape_str()
                        << "; its variable has " << n << " float32 elements");
    STRATA_CHECK(grad.device() == device_, InvalidArgument,
                 owner_ << ": gradient " << index << " is on " << grad.device().str() << ", this replica's buckets on "
                        << device_.str());
    pack(bucket, p.offset[index], grad);
    p.added[index] = grad.raw_data();
  } else {
    zero(bucket, p.offset[index], n);
  }
  put(bucket, p.flag_of[index], grad.defined() ? 1.0f : 0.0f);
  --p.pending[static_cast<size_t>(b)];
  issue_ready(p);
}

void GradientReducer::end() {
  STRATA_CHECK(call_ != nullptr && !ended_, Error, owner_ << ": a gradient call ended that never began");
  STRATA_CHECK(call_->next_issue == call_->buckets.size(), Error,
               owner_ << ": a gradient bucket was never filled (a source was not reported)");
  ended_ = true;
}

void GradientReducer::reduce(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
  STRATA_CHECK(grads.size() == vars.size(), InvalidArgument,
               owner_ << ": " << grads.size() << " gradients for " << vars.size() << " variables");
  begin(vars);
  for (size_t i = 0; i < grads.size(); ++i) add(i, grads[i]);
  end();
}

bool GradientReducer::matches(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) const {
  if (call_ == nullptr || !ended_ || call_->added.size() != vars.size() || grads.size() != vars.size()) return false;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (call_->bucket_of[i] < 0) continue;
    const void* data = grads[i].defined() ? grads[i].raw_data() : nullptr;
    if (data != call_->added[i]) return false;
  }
  std::vector<uint64_t> ids = ids_of(vars);
  ids.push_back(call_->side);
  const auto it = plans_.find(ids);
  return it != plans_.end() && it->second.get() == call_;
}

const GradientReducer::Plan& GradientReducer::last() const {
  STRATA_CHECK(call_ != nullptr, Error, owner_ << ": no gradient call to read");
  return *call_;
}

size_t GradientReducer::num_buckets() const { return last().buckets.size(); }

bool GradientReducer::poll(size_t k) const {
  const auto& work = last().works[k];
  if (work == nullptr || !work->is_completed()) return false;
  work->wait();  // rethrows a failure
  return true;
}

void GradientReducer::wait_all() const {
  const Plan& p = last();
  STRATA_CHECK(ended_, Error, owner_ << ": waiting for the gradients of a call that has not ended");
  for (const auto& work : p.works) work->wait();
}

const std::vector<size_t>& GradientReducer::members(size_t k) const { return last().members[k]; }

float GradientReducer::votes(size_t k) const {
  const Tensor& bucket = last().buckets[k];
  return get(bucket, bucket.numel() - 1);
}

std::vector<double> GradientReducer::side_sums() const {
  const Plan& p = last();
  std::vector<double> sums(p.side);
  if (p.side == 0) return sums;
  const std::vector<float> at = get_all(p.buckets.back(), p.side_at, 2 * static_cast<int64_t>(p.side));
  for (size_t i = 0; i < p.side; ++i) sums[i] = static_cast<double>(at[i]) + static_cast<double>(at[p.side + i]);
  return sums;
}

Tensor GradientReducer::reduced(size_t index, const Shape& shape) const {
  const Plan& p = last();
  const int b = p.bucket_of[index];
  if (b < 0) return {};
  const Tensor& bucket = p.buckets[static_cast<size_t>(b)];
  if (get(bucket, p.flag_of[index]) == 0.0f) return {};
  return bucket.slice(p.offset[index], p.offset[index] + p.numel[index]).reshape(shape);
}

}  // namespace strata::distribute::detail
