// The "nccl" backend (strata/comm/nccl.h): the seam only. NCCL needs CUDA tensors, which arrive with the CUDA
// issue; until then the factory refuses in every build, and points CPU users at the backends that exist.
// Thread-safety: stateless.
#include "strata/comm/nccl.h"

#include "strata/error.h"

namespace strata::comm {

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Store> /*store*/, int /*rank*/, int /*size*/,
                                                     NcclOptions /*options*/) {
  STRATA_THROW(Unavailable,
               "the nccl backend needs the CUDA build (STRATA_WITH_CUDA=ON) and GPU tensors; on CPU use gloo or mpi");
}

}  // namespace strata::comm
