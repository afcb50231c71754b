// make_device_copy_queue in a build without CUDA (core/copy_queue.h); CUDA's queue is core/cuda/copy_queue_cuda.cc.
// Thread-safety: stateless.
#include "core/copy_queue.h"

#include "strata/error.h"

namespace strata::detail {

#ifndef STRATA_WITH_CUDA
std::unique_ptr<CopyQueue> make_device_copy_queue(Device device) {
  STRATA_CHECK(!device.is_cpu(), InvalidArgument, "a copy queue goes to a GPU, not to the host");
  STRATA_THROW(Unavailable, "cannot queue copies to " << device.str()
                                                      << ": this build of strata has no CUDA support (configure with "
                                                         "-DSTRATA_WITH_CUDA=ON)");
}
#endif

}  // namespace strata::detail
