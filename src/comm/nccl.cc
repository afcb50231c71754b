// The "nccl" backend (strata/comm/nccl.h): the factory and the bootstrap steps that need no GPU. The communicator
// itself is CUDA code (comm/cuda/nccl_communicator.cc, built only with STRATA_WITH_CUDA); without it the factory
// throws Unavailable and points CPU users at the backends that exist.
// Also the in-process group (make_nccl_local_group): one thread per rank while the group connects.
// Thread-safety: stateless; the store serialises its own calls.
#include "strata/comm/nccl.h"

#include <exception>
#include <thread>

#include "comm/nccl_internal.h"
#include "core/device_memory.h"
#include "strata/error.h"

namespace strata::comm {

namespace nccl_detail {

std::string unique_id_key(const std::string& prefix) { return prefix + "/unique_id"; }

void claim_rank(Store& store, const std::string& prefix, int rank, int size) {
  const std::string key = prefix + "/joined/rank-" + std::to_string(rank);
  const int64_t claims = store.add(key, 1);
  STRATA_CHECK(
      claims == 1, InvalidArgument,
      "nccl group of " << size << ": rank " << rank << " claimed prefix '" << prefix << "' " << claims
                       << " times (key '" << key
                       << "'); a group needs a fresh prefix (a rebuilt one too), else a stale NCCL id is read");
}

void publish_unique_id(Store& store, const std::string& prefix, const std::string& id) {
  store.set(unique_id_key(prefix), id);
}

std::string fetch_unique_id(Store& store, const std::string& prefix, int rank, size_t expected_bytes,
                            std::chrono::milliseconds timeout) {
  const std::string key = unique_id_key(prefix);
  try {
    store.wait({key}, timeout);
  } catch (const Timeout& e) {
    STRATA_THROW(Timeout, "nccl: rank " << rank << " waited " << timeout.count() << " ms for key '" << key
                                        << "' (NCCL's unique id, set by rank 0 of the group under prefix '" << prefix
                                        << "'); is rank 0 up? (" << e.what() << ")");
  }
  std::string id = store.get(key);
  STRATA_CHECK(id.size() == expected_bytes, InvalidArgument,
               "nccl: key '" << key << "' holds " << id.size() << " bytes where NCCL's unique id has " << expected_bytes
                             << " (another program's key under prefix '" << prefix << "'?)");
  return id;
}

int choose_device(int rank, int requested, int visible) {
  STRATA_CHECK(
      visible > 0, Unavailable,
      "the nccl backend: no CUDA device visible to rank " << rank << " (NCCL runs on GPUs; on CPU use gloo or mpi)");
  if (requested < 0) return rank % visible;
  STRATA_CHECK(requested < visible, InvalidArgument,
               "the nccl backend: rank " << rank << " asks for cuda:" << requested << " but " << visible
                                         << " CUDA devices are visible");
  return requested;
}

}  // namespace nccl_detail

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Store> store, int rank, int size,
                                                     NcclOptions options) {
#ifdef STRATA_WITH_CUDA
  STRATA_CHECK(size >= 1 && rank >= 0 && rank < size, InvalidArgument,
               "the nccl backend: rank " << rank << " of a group of " << size);
  STRATA_CHECK(store != nullptr, InvalidArgument, "the nccl backend needs a store for its ranks to meet");
  STRATA_CHECK(options.timeout.count() > 0 && options.connect_timeout.count() >= 0, InvalidArgument,
               "the nccl backend: the timeout must be positive and the connect timeout not negative (got "
                   << options.timeout.count() << " ms and " << options.connect_timeout.count() << " ms)");
  // Before touching the store: a machine without a GPU fails at once, naming why, instead of making peers wait.
  options.device = nccl_detail::choose_device(rank, options.device, detail::cuda_device_count());
  return nccl_detail::make_cuda_communicator(std::move(store), rank, size, std::move(options));
#else
  (void)store;
  (void)rank;
  (void)size;
  (void)options;
  STRATA_THROW(Unavailable,
               "the nccl backend needs the CUDA build (STRATA_WITH_CUDA=ON) and GPU tensors; on CPU use gloo or mpi");
#endif
}

std::vector<std::shared_ptr<Communicator>> make_nccl_local_group(const std::vector<int>& devices, NcclOptions options) {
  const int n = static_cast<int>(devices.size());
  STRATA_CHECK(n >= 1, InvalidArgument, "an in-process nccl group needs at least one GPU");
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < i; ++j) {
      STRATA_CHECK(devices[static_cast<size_t>(i)] != devices[static_cast<size_t>(j)], InvalidArgument,
                   "an in-process nccl group: cuda:" << devices[static_cast<size_t>(i)]
                                                     << " is listed twice; each rank needs its own GPU");
    }
  }
  const std::shared_ptr<Store> store = make_in_memory_store();
  std::vector<std::shared_ptr<Communicator>> comms(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  {
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r) {
      ranks.emplace_back([&, r] {
        NcclOptions mine = options;
        mine.device = devices[static_cast<size_t>(r)];
        try {
          comms[static_cast<size_t>(r)] = make_nccl_communicator(store, r, n, std::move(mine));
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
    }
    for (std::thread& t : ranks) t.join();
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return comms;
}

}  // namespace strata::comm
