// The local backend's collective algorithms (strata/comm/local.h): what each rank does between the steps of
// all_reduce (TF's cross-device ops), broadcast, all_gather and reduce_scatter, reading the other ranks'
// tensors in shared memory and writing only its own.
// Thread-safety: runs on a rank's worker thread; see local_internal.h.
#include <type_traits>

#include "comm/local_internal.h"

namespace strata::comm::local_detail {

void LocalCommunicator::execute(Op& op) {
  if (group_->barrier.aborted()) {
    STRATA_THROW(Timeout, group_->name << ": " << op_name(op) << " on rank " << rank_
                                       << " was not run: the group was aborted: " << group_->barrier.abort_reason());
  }
  if (op.kind == Kind::kSend) return run_send(op);
  if (op.kind == Kind::kRecv) return run_recv(op);
  describe(op, group_->slots[rank_][op.seq & 1]);
  step(op, "arrive");
  validate(op);

  const Bucket& mine = view(rank_, op);
  switch (op.kind) {
    case Kind::kAllReduce:
      run_all_reduce(op);
      return;
    case Kind::kBroadcast:
      if (mine.numel() == 0) return;
      if (rank_ != op.root) copy_from(op, op.root, 0, mine.numel());
      step(op, "copy from root");
      return;
    case Kind::kAllGather: {
      const size_t n = static_cast<size_t>(shape_numel(slot(rank_, op).shapes[0])) * dtype_size(slot(rank_, op).dtype);
      if (n == 0) return;
      for (int q = 0; q < group_->size; ++q) {
        const char* src = view(q, op).segment<char>(0);
        char* dst = mine.segment<char>(1) + q * n;
        if (src != dst) std::memcpy(dst, src, n);
      }
      step(op, "copy inputs");
      return;
    }
    case Kind::kReduceScatter:
      run_reduce_scatter(op);
      return;
    case Kind::kBarrier:
    case Kind::kNone:
    case Kind::kSend:
    case Kind::kRecv:
    case Kind::kNewGroup:
      return;
  }
}

// Rank r reduces chunk r of every rank's input (rank order 0..N-1) into its output; nobody writes an input.
void LocalCommunicator::run_reduce_scatter(const Op& op) {
  const int size = group_->size;
  const Descriptor& mine = slot(rank_, op);
  const int64_t n = shape_numel(mine.shapes[1]);
  if (n == 0) return;
  const float divisor = op.reduce == ReduceOp::kMean ? static_cast<float>(size) : 0.0f;
  auto reduce = [&](auto* out) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(out)>>;
    std::vector<const T*>& inputs = scratch<T>();
    inputs.resize(size);
    for (int q = 0; q < size; ++q) inputs[q] = view(q, op).template segment<T>(0) + n * rank_;
    detail::reduce_piece(out, inputs.data(), size, n, op.reduce, divisor);
  };
  switch (mine.dtype) {
    case DType::kBFloat16:
      reduce(mine.bucket.segment<BFloat16>(1));
      break;
    case DType::kInt64:
      reduce(mine.bucket.segment<int64_t>(1));
      break;
    default:
      reduce(mine.bucket.segment<float>(1));
      break;
  }
  step(op, "reduce-scatter");
}

void LocalCommunicator::run_all_reduce(const Op& op) {
  const int size = group_->size;
  const int64_t numel = view(rank_, op).numel();
  if (numel == 0) return;
  const float divisor = op.reduce == ReduceOp::kMean ? static_cast<float>(size) : 0.0f;
  std::vector<int> everyone(size);
  for (int q = 0; q < size; ++q) everyone[q] = q;

  const DType dtype = slot(rank_, op).dtype;
  const int64_t align = 64 / static_cast<int64_t>(dtype_size(dtype));  // chunks of whole cache lines
  // bfloat16 is combined in rank order and rounded once, so the pairwise tree runs as the ring.
  const AllReduceAlgorithm algorithm =
      dtype == DType::kBFloat16 && group_->options.algorithm == AllReduceAlgorithm::kTree ? AllReduceAlgorithm::kRing
                                                                                          : group_->options.algorithm;
  switch (algorithm) {
    case AllReduceAlgorithm::kRing: {
      // Reduce-scatter: this rank owns chunk `rank_` and reduces it over every rank, in rank order.
      const auto [begin, end] = detail::chunk_range(numel, size, rank_, align);
      reduce_into_mine(op, begin, end, everyone, divisor);
      step(op, "reduce-scatter");
      // All-gather: copy every other chunk from its owner (who no longer writes it).
      for (int q = 0; q < size; ++q) {
        if (q == rank_) continue;
        const auto [b, e] = detail::chunk_range(numel, size, q, align);
        copy_from(op, q, b, e);
      }
      step(op, "all-gather");
      return;
    }
    case AllReduceAlgorithm::kReduceToOne:
      if (rank_ == 0) reduce_into_mine(op, 0, numel, everyone, divisor);
      step(op, "reduce to rank 0");
      if (rank_ != 0) copy_from(op, 0, 0, numel);
      step(op, "copy from rank 0");
      return;
    case AllReduceAlgorithm::kTree:
      // Step s: rank r (a multiple of 2s) adds rank r+s into itself; rank r+s is idle from then on.
      for (int s = 1; s < size; s *= 2) {
        if (rank_ % (2 * s) == 0 && rank_ + s < size) {
          const bool last = rank_ == 0 && 2 * s >= size;
          reduce_into_mine(op, 0, numel, {rank_, rank_ + s}, last ? divisor : 0.0f);
        }
        step(op, "tree distance " + std::to_string(s));
      }
      if (rank_ != 0) copy_from(op, 0, 0, numel);
      step(op, "copy from rank 0");
      return;
  }
}

}  // namespace strata::comm::local_detail
