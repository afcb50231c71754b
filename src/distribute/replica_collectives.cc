// Cross-replica exchanges over a communicator (replica_collectives.h). Numbers and gathered tensors travel as
// int64 words so that every bit arrives unchanged whatever the dtype.
// Thread-safety: one thread per rank.
#include "distribute/replica_collectives.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "kernels/kernels.h"

namespace strata::distribute::detail {

namespace {
constexpr int64_t kMaxRank = 8;
constexpr int64_t kHeader = 2 + kMaxRank;  // rank, dtype, dims (padded)

// An all_gather of host `mine` into host `all`, through `on` when that is a GPU.
void gather_words(comm::Communicator& comm, const Tensor& mine, Tensor& all, Device on) {
  if (on.is_cpu()) {
    comm.all_gather(mine, all)->wait();
    return;
  }
  Tensor there = Tensor::empty(all.shape(), all.dtype(), on);
  comm.all_gather(mine.to(on), there)->wait();
  all = there.to(Device::cpu());
}

std::string shape_list(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes) {
  std::ostringstream out;
  for (size_t r = 0; r < shapes.size(); ++r) out << (r ? "; " : "") << "replica " << r << ": " << dtype_name(dtypes[r]) << shape_str(shapes[r]);
  return out.str();
}
}  // namespace

Device exchange_device(const comm::Communicator& comm, Device replica) {
  return comm.backend() == "nccl" ? replica : Device::cpu();
}

Tensor all_reduce_tensor(comm::Communicator& comm, ReduceOp op, const Tensor& value, Device on) {
  STRATA_CHECK(value.defined(), InvalidArgument, "all_reduce: the value is undefined");
  STRATA_CHECK(value.dtype() == DType::kFloat32 || value.dtype() == DType::kBFloat16 || value.dtype() == DType::kInt64,
               InvalidArgument, "all_reduce: " << dtype_name(value.dtype()) << " values cannot be reduced; "
                                               << "use float32, bfloat16 or int64");
  // (On the host as given; through the communicator's GPU, and back to the value's device, for nccl.)
  Tensor total = on.is_cpu() || value.device() == on ? value.clone() : value.to(on);
  const bool float_mean = op == ReduceOp::kMean && total.dtype() == DType::kFloat32;
  const comm::ReduceOp how = op == ReduceOp::kSum || float_mean ? comm::ReduceOp::kSum : comm::ReduceOp::kMean;
  comm.all_reduce({total}, how)->wait();
  if (float_mean) total = kernels::affine(total, 1.0f / static_cast<float>(comm.size()), 0.0f);
  return total.device() == value.device() ? total : total.to(value.device());
}

std::vector<double> all_reduce_numbers(comm::Communicator& comm, const std::vector<double>& values, Device on) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (n == 0) return {};
  Tensor mine = Tensor::empty({n}, DType::kInt64);
  std::memcpy(mine.raw_data(), values.data(), values.size() * sizeof(double));
  Tensor all = Tensor::empty({comm.size() * n}, DType::kInt64);
  gather_words(comm, mine, all, on);
  std::vector<double> total(values.size(), 0.0);
  const auto* words = static_cast<const int64_t*>(all.raw_data());
  for (int r = 0; r < comm.size(); ++r) {
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, words + r * n + i, sizeof(double));
      total[static_cast<size_t>(i)] += v;
    }
  }
  return total;
}

std::vector<std::string> all_gather_bytes(comm::Communicator& comm, const std::string& bytes, Device on) {
  std::vector<double> lengths(static_cast<size_t>(comm.size()), 0.0);
  lengths[static_cast<size_t>(comm.rank())] = static_cast<double>(bytes.size());
  lengths = all_reduce_numbers(comm, lengths, on);
  const auto longest = static_cast<int64_t>(*std::max_element(lengths.begin(), lengths.end()));
  const int64_t words = (longest + 7) / 8;
  std::vector<std::string> out;
  if (words == 0) return std::vector<std::string>(static_cast<size_t>(comm.size()));
  Tensor mine = Tensor::zeros({words}, DType::kInt64);
  std::memcpy(mine.raw_data(), bytes.data(), bytes.size());
  Tensor all = Tensor::empty({comm.size() * words}, DType::kInt64);
  gather_words(comm, mine, all, on);
  const auto* base = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < comm.size(); ++r)
    out.emplace_back(base + static_cast<size_t>(r * words * 8), static_cast<size_t>(lengths[static_cast<size_t>(r)]));
  return out;
}

double all_reduce_number(comm::Communicator& comm, ReduceOp op, double value, Device on) {
  const double total = all_reduce_numbers(comm, {value}, on)[0];
  return op == ReduceOp::kMean ? total / comm.size() : total;
}

Tensor all_gather_tensor(comm::Communicator& comm, const Tensor& value, int axis, Device on) {
  STRATA_CHECK(value.defined(), InvalidArgument, "gather: the value is undefined");
  const int64_t rank = value.rank();
  STRATA_CHECK(rank >= 1 && rank <= kMaxRank, InvalidArgument,
               "gather: values of rank " << rank << " cannot be gathered along an axis (rank 1 to " << kMaxRank << ")");
  const int ax = axis < 0 ? axis + static_cast<int>(rank) : axis;
  STRATA_CHECK(ax >= 0 && ax < rank, InvalidArgument, "gather: axis " << axis << " is out of range for " << value.shape_str());
  const int size = comm.size();

  // Every rank's dtype and shape.
  Tensor header = Tensor::zeros({kHeader}, DType::kInt64);
  auto* h = static_cast<int64_t*>(header.raw_data());
  h[0] = rank;
  h[1] = static_cast<int64_t>(value.dtype());
  for (int64_t d = 0; d < rank; ++d) h[2 + d] = value.shape()[static_cast<size_t>(d)];
  Tensor headers = Tensor::empty({size * kHeader}, DType::kInt64);
  gather_words(comm, header, headers, on);
  std::vector<Shape> shapes(static_cast<size_t>(size));
  std::vector<DType> dtypes(static_cast<size_t>(size));
  int64_t most = 0;
  bool fits = true;
  for (int r = 0; r < size; ++r) {
    const auto* hr = static_cast<const int64_t*>(headers.raw_data()) + r * kHeader;
    dtypes[static_cast<size_t>(r)] = static_cast<DType>(hr[1]);
    shapes[static_cast<size_t>(r)].assign(hr + 2, hr + 2 + hr[0]);
    const Shape& s = shapes[static_cast<size_t>(r)];
    fits = fits && hr[0] == rank && dtypes[static_cast<size_t>(r)] == value.dtype();
    for (int64_t d = 0; fits && d < rank; ++d) fits = d == ax || s[static_cast<size_t>(d)] == value.shape()[static_cast<size_t>(d)];
    most = std::max<int64_t>(most, shape_numel(s) * static_cast<int64_t>(dtype_size(dtypes[static_cast<size_t>(r)])));
  }
  STRATA_CHECK(fits, ShapeError, "gather along axis " << axis << ": the replicas' values differ other than along it: "
                                                     << shape_list(shapes, dtypes));

  // Every rank's bytes, each padded to the largest.
  const int64_t words = (most + 7) / 8;
  Tensor mine = Tensor::zeros({std::max<int64_t>(words, 1)}, DType::kInt64);
  const Tensor host = value.device().is_cpu() ? value : value.to(Device::cpu());
  std::memcpy(mine.raw_data(), host.raw_data(), value.nbytes());  // tensors are dense
  Tensor all = Tensor::empty({size * mine.numel()}, DType::kInt64);
  gather_words(comm, mine, all, on);
  std::vector<Tensor> parts;
  for (int r = 0; r < size; ++r) {
    Tensor part = Tensor::empty(shapes[static_cast<size_t>(r)], value.dtype());
    std::memcpy(part.raw_data(), static_cast<const int64_t*>(all.raw_data()) + r * mine.numel(), part.nbytes());
    parts.push_back(std::move(part));
  }
  return size == 1 ? parts[0] : kernels::concat(parts, ax);
}

}  // namespace strata::distribute::detail
