// The data path of the gloo backend (comm/gloo_internal.h): checking one rank's arguments and running one
// collective on Gloo's options-style functions — buckets flattened, bfloat16 widened, kMean divided; a float32
// all-reduce with Compression::kBFloat16 narrowed to bfloat16 and reduced as that (comm/bf16_wire.h).
// Thread-safety: a GlooCollectives is used by its communicator's worker thread only.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstring>

#include "comm/bf16_wire.h"
#include "comm/flight_recorder.h"
#include "comm/gloo_internal.h"

namespace strata::comm::gloo_detail {
namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// int64 sums wrap around (as the local backend's), computed in uint64 so that overflow is defined.
void sum_int64(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<int64_t*>(c);
  const auto* x = static_cast<const int64_t*>(a);
  const auto* y = static_cast<const int64_t*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(static_cast<uint64_t>(x[i]) + static_cast<uint64_t>(y[i]));
}

// Gloo's element-wise functions for `op` on float32 or int64 (bfloat16 is reduced as float32).
ReduceFn reduce_function(ReduceOp op, DType dtype) {
  const bool ints = dtype == DType::kInt64;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return ints ? &sum_int64 : static_cast<ReduceFn>(&gloo::sum<float>);
    case ReduceOp::kMax:
      return ints ? static_cast<ReduceFn>(&gloo::max<int64_t>) : static_cast<ReduceFn>(&gloo::max<float>);
    case ReduceOp::kMin:
      return ints ? static_cast<ReduceFn>(&gloo::min<int64_t>) : static_cast<ReduceFn>(&gloo::min<float>);
  }
  return &gloo::sum<float>;
}

// Gloo's element-wise function for Compression::kBFloat16 (counts are in bfloat16 elements).
void sum_bf16(void* c, const void* a, const void* b, size_t n) {
  detail::sum_bf16(static_cast<BFloat16*>(c), static_cast<const BFloat16*>(a), static_cast<const BFloat16*>(b), n);
}

// Point-to-point messages use their own slot prefix (Gloo's collectives use 0x01-0x08) and the caller's tag, so
// a recv matches the sends of its source with the same tag, first posted first matched.
constexpr uint8_t kP2PSlotPrefix = 0x70;

}  // namespace

GlooCollectives::PostedSend GlooCollectives::post_send(Op& op) {
  PostedSend posted;
  size_t nbytes = 0;
  for (const Tensor& t : op.tensors) nbytes += t.nbytes();
  if (nbytes == 0) return posted;
  void* data = op.tensors[0].raw_data();
  if (op.tensors.size() > 1) {
    posted.copy.resize(nbytes);
    size_t offset = 0;
    for (Tensor& t : op.tensors) {
      std::memcpy(posted.copy.data() + offset, t.raw_data(), t.nbytes());
      offset += t.nbytes();
    }
    data = posted.copy.data();
  }
  posted.buffer = context_->createUnboundBuffer(data, nbytes);
  posted.buffer->send(op.root, gloo::Slot::build(kP2PSlotPrefix, static_cast<uint32_t>(op.tag)));
  return posted;
}

// A problem with this rank's own arguments, or "". (Gloo cannot compare arguments across ranks without a
// round trip; mismatched shapes across ranks end in a Gloo error or the timeout.)
std::string GlooCollectives::check_arguments(const Op& op) const {
  if (op.timeout.count() <= 0) return "timeout must be positive, got " + std::to_string(op.timeout.count()) + " ms";
  for (size_t i = 0; i < op.tensors.size(); ++i) {
    const Tensor& t = op.tensors[i];
    const bool pair = op.kind == Kind::kAllGather || op.kind == Kind::kReduceScatter;
    const std::string what = pair ? (i == 0 ? "input" : "output") : "tensor " + std::to_string(i);
    if (!t.defined()) return what + " is undefined";
    if (t.dtype() != DType::kFloat32 && t.dtype() != DType::kBFloat16 && t.dtype() != DType::kInt64) {
      return what + " is " + dtype_name(t.dtype()) + ", wants float32, bfloat16 or int64";
    }
    if (i > 0 && t.dtype() != op.tensors[0].dtype()) {
      return what + " is " + dtype_name(t.dtype()) + " but " + (pair ? "input" : "tensor 0") +
             " is " + dtype_name(op.tensors[0].dtype()) + " (one dtype per call)";
    }
    if (!t.device().is_cpu()) return what + " is on " + t.device().str() + ", wants host memory";
  }
  if (op.kind == Kind::kAllReduce && !op.tensors.empty()) {
    const std::string problem = detail::check_compression(op.compression, op.reduce, op.tensors[0].dtype());
    if (!problem.empty()) return problem;
  }
  if ((op.kind == Kind::kSend || op.kind == Kind::kRecv) && (op.root < 0 || op.root >= size() || op.root == rank())) {
    return std::string(op.kind == Kind::kSend ? "destination" : "source") + " rank " + std::to_string(op.root) +
           (op.root == rank() ? " is this rank" : " is not a rank of a group of " + std::to_string(size()));
  }
  if ((op.kind == Kind::kSend || op.kind == Kind::kRecv) && op.tag < 0) {
    return "tag " + std::to_string(op.tag) + " is negative";
  }
  if (op.kind == Kind::kBroadcast && (op.root < 0 || op.root >= size())) {
    return "root " + std::to_string(op.root) + " is not a rank of a group of " + std::to_string(size());
  }
  if (op.kind == Kind::kReduceScatter) {
    const Shape& in = op.tensors[0].shape();
    if (in.empty() || in[0] % size() != 0) {
      return "input is " + shape_str(in) + ", wants a first dimension divisible by the group size " +
             std::to_string(size());
    }
    Shape want = in;
    want[0] /= size();
    if (op.tensors[1].shape() != want) {
      return "output is " + shape_str(op.tensors[1].shape()) + ", wants " + shape_str(want) + " (input " +
             shape_str(in) + " / " + std::to_string(size()) + ")";
    }
  }
  if (op.kind == Kind::kAllGather) {
    const Shape& in = op.tensors[0].shape();
    Shape want = in.empty() ? Shape{static_cast<int64_t>(size())} : in;
    if (!in.empty()) want[0] *= size();
    if (op.tensors[1].shape() != want) {
      return "output is " + shape_str(op.tensors[1].shape()) + ", wants " + shape_str(want) + " (" +
             std::to_string(size()) + " x input " + shape_str(in) + ")";
    }
  }
  return "";
}

// The bucket as one array of its dtype: the tensor's own memory when there is one, else flat_ holding a copy.
void* GlooCollectives::gather_bucket(std::vector<Tensor>& tensors, size_t nbytes, bool copy_in) {
  if (tensors.size() == 1) return tensors[0].raw_data();
  flat_.resize(nbytes);
  if (copy_in) {
    size_t offset = 0;
    for (Tensor& t : tensors) {
      std::memcpy(flat_.data() + offset, t.raw_data(), t.nbytes());
      offset += t.nbytes();
    }
  }
  return flat_.data();
}

void GlooCollectives::scatter_bucket(std::vector<Tensor>& tensors) {
  if (tensors.size() == 1) return;
  size_t offset = 0;
  for (Tensor& t : tensors) {
    std::memcpy(t.raw_data(), flat_.data() + offset, t.nbytes());
    offset += t.nbytes();
  }
}

// float32 and int64: reduced in place (one tensor) or in flat_. bfloat16: widened to float32 in wide_, reduced,
// and rounded back once, as the local backend does.
void GlooCollectives::run_all_reduce(Op& op, size_t numel) {
  if (op.compression == Compression::kBFloat16) return run_bf16_all_reduce(op);
  const DType dtype = op.tensors[0].dtype();
  void* data = nullptr;
  if (dtype == DType::kBFloat16) {
    wide_.resize(numel);
    size_t k = 0;
    for (Tensor& t : op.tensors) {
      const auto* p = t.data<BFloat16>();
      for (int64_t i = 0; i < t.numel(); ++i) wide_[k++] = static_cast<float>(p[i]);
    }
    data = wide_.data();
  } else {
    data = gather_bucket(op.tensors, numel * dtype_size(dtype), true);
  }
  gloo::AllreduceOptions opts(context_);
  if (dtype == DType::kInt64) {
    opts.setOutput(static_cast<int64_t*>(data), numel);
  } else {
    opts.setOutput(static_cast<float*>(data), numel);
  }
  opts.setReduceFunction(reduce_function(op.reduce, dtype));
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setTag(static_cast<uint32_t>(op.seq));  // collectives only: numbered alike on every rank
  opts.setTimeout(op.timeout);
  wire_bytes_.fetch_add(static_cast<int64_t>(numel * (dtype == DType::kInt64 ? 8 : 4)), std::memory_order_relaxed);
  gloo::allreduce(opts);
  if (op.reduce == ReduceOp::kMean) {
    if (dtype == DType::kInt64) {
      auto* p = static_cast<int64_t*>(data);
      for (size_t i = 0; i < numel; ++i) p[i] /= size();
    } else {
      auto* p = static_cast<float*>(data);
      const float divisor = static_cast<float>(size());
      for (size_t i = 0; i < numel; ++i) p[i] /= divisor;
    }
  }
  if (dtype == DType::kBFloat16) {
    size_t k = 0;
    for (Tensor& t : op.tensors) {
      auto* p = t.data<BFloat16>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = BFloat16(wide_[k++]);
    }
  } else {
    scatter_bucket(op.tensors);
  }
}

// Compression::kBFloat16 (float32, sum or mean): the bucket rounded into narrow_, Gloo's ring all-reduce on the
// bfloat16 elements with sum_bf16 (every pairwise sum in float32, rounded back: each element is reduced along one
// path and copied, so every rank ends with the same bits), then widened into the tensors (kMean divides after).
void GlooCollectives::run_bf16_all_reduce(Op& op) {
  detail::narrow_to_bf16(op.tensors, narrow_);
  gloo::AllreduceOptions opts(context_);
  opts.setOutput(narrow_.data(), narrow_.size());
  opts.setReduceFunction(&sum_bf16);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setTag(static_cast<uint32_t>(op.seq));
  opts.setTimeout(op.timeout);
  wire_bytes_.fetch_add(static_cast<int64_t>(narrow_.size() * sizeof(BFloat16)), std::memory_order_relaxed);
  gloo::allreduce(opts);
  detail::widen_from_bf16(narrow_.data(), op.tensors, op.reduce == ReduceOp::kMean ? static_cast<float>(size()) : 1.0f);
}

namespace {
// The fields of a collective's signature, in order.
enum SignatureField { kKind, kDtype, kBytes, kRoot, kReduce, kSignatureFields };
// A signature's exchange uses its collective's number with this bit set as its Gloo tag: its own slots.
constexpr uint32_t kSignatureTag = 0x80000000u;

// "all_reduce of float32 (1.4 MiB, sum)", "broadcast of int64 (8 B, root 1)".
std::string describe(const int64_t* s) {
  const auto kind = static_cast<Kind>(s[kKind]);
  std::string out = kind_name(kind);
  if (kind == Kind::kBarrier) return out;
  out += " of " + std::string(dtype_name(static_cast<DType>(s[kDtype]))) + " (" + detail::bytes_str(s[kBytes]);
  if (kind == Kind::kBroadcast) out += ", root " + std::to_string(s[kRoot]);
  if (kind == Kind::kAllReduce || kind == Kind::kReduceScatter) {
    out += ", " + to_string(static_cast<ReduceOp>(s[kReduce]));
  }
  return out + ")";
}
}  // namespace

void GlooCollectives::check_signature(const Op& op, size_t nbytes) {
  std::vector<int64_t> all(static_cast<size_t>(kSignatureFields) * static_cast<size_t>(size()));
  int64_t mine[kSignatureFields] = {};
  mine[kKind] = static_cast<int64_t>(op.kind);
  mine[kDtype] = op.tensors.empty() ? -1 : static_cast<int64_t>(op.tensors[0].dtype());
  // all_gather and reduce_scatter: the input's bytes (the output follows from it).
  mine[kBytes] = op.kind == Kind::kAllGather || op.kind == Kind::kReduceScatter
                     ? static_cast<int64_t>(op.tensors[0].nbytes())
                     : static_cast<int64_t>(nbytes);
  mine[kRoot] = op.kind == Kind::kBroadcast ? op.root : 0;
  mine[kReduce] = op.kind == Kind::kAllReduce || op.kind == Kind::kReduceScatter ? static_cast<int64_t>(op.reduce) : 0;
  gloo::AllgatherOptions opts(context_);
  opts.setInput(mine, kSignatureFields);
  opts.setOutput(all.data(), all.size());
  opts.setTag(kSignatureTag | static_cast<uint32_t>(op.seq));
  opts.setTimeout(op.timeout);
  gloo::allgather(opts);
  for (int r = 0; r < size(); ++r) {
    const int64_t* theirs = all.data() + static_cast<size_t>(r) * kSignatureFields;
    if (std::equal(mine, mine + kSignatureFields, theirs)) continue;
    STRATA_THROW(SignatureMismatch, "collective #" << op.seq << ": rank " << r << " called " << describe(theirs)
                                                   << " where rank " << rank() << " called " << describe(mine)
                                                   << ": the ranks' programs (or jobs) differ");
  }
}

void GlooCollectives::execute(Op& op) {
  const auto tag = static_cast<uint32_t>(op.seq);
  size_t numel = 0, nbytes = 0;
  for (const Tensor& t : op.tensors) {
    numel += static_cast<size_t>(t.numel());
    nbytes += t.nbytes();
  }
  const bool collective = op.kind == Kind::kAllReduce || op.kind == Kind::kBroadcast || op.kind == Kind::kAllGather ||
                          op.kind == Kind::kBarrier || op.kind == Kind::kReduceScatter;
  if (collective && size() > 1) check_signature(op, nbytes);  // (a recv is matched by its tag alone)
  switch (op.kind) {
    case Kind::kAllReduce:
      if (numel > 0) run_all_reduce(op, numel);
      return;
    case Kind::kBroadcast: {  // bytes: any dtype
      if (nbytes == 0) return;
      auto* data = static_cast<unsigned char*>(gather_bucket(op.tensors, nbytes, rank() == op.root));
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data, nbytes);
      opts.setRoot(op.root);
      opts.setTag(tag);
      opts.setTimeout(op.timeout);
      gloo::broadcast(opts);
      if (rank() != op.root) scatter_bucket(op.tensors);
      return;
    }
    case Kind::kAllGather: {  // bytes: any dtype
      const size_t n = op.tensors[0].nbytes();
      if (n == 0) return;
      gloo::AllgatherOptions opts(context_);
      opts.setInput(static_cast<unsigned char*>(op.tensors[0].raw_data()), n);
      opts.setOutput(static_cast<unsigned char*>(op.tensors[1].raw_data()), n * static_cast<size_t>(size()));
      opts.setTag(tag);
      opts.setTimeout(op.timeout);
      gloo::allgather(opts);
      return;
    }
    case Kind::kReduceScatter: {
      const size_t chunk = op.tensors[1].nbytes();
      if (chunk == 0) return;
      Tensor output = op.tensors[1];
      op.tensors = {op.tensors[0].clone()};  // reduced in a copy: the input stays as it was
      run_all_reduce(op, static_cast<size_t>(op.tensors[0].numel()));
      std::memcpy(output.raw_data(), static_cast<const unsigned char*>(op.tensors[0].raw_data()) + rank() * chunk, chunk);
      return;
    }
    case Kind::kRecv: {
      if (nbytes == 0) return;
      void* data = gather_bucket(op.tensors, nbytes, false);
      auto buffer = context_->createUnboundBuffer(data, nbytes);
      buffer->recv(op.root, gloo::Slot::build(kP2PSlotPrefix, static_cast<uint32_t>(op.tag)));
      if (!buffer->waitRecv(op.timeout)) throw gloo::IoException("the recv was aborted");
      scatter_bucket(op.tensors);
      return;
    }
    case Kind::kSend:
      return;  // posted by post_send
    case Kind::kNone:
    case Kind::kNewGroup:
      return;  // never queued: new_group builds its context when called
    case Kind::kBarrier: {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(op.timeout);
      gloo::barrier(opts);
      return;
    }
  }
}

}  // namespace strata::comm::gloo_detail
