// One stream per device, created on first use (see cuda_context.h). Thread-safety: the streams are made under a
// mutex and never destroyed (the process's exit tears the context down).
#include "core/cuda/cuda_context.h"

#include <mutex>
#include <vector>

#include "strata/error.h"

namespace strata::detail::cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  // Clear the thread's last error (unless it is sticky), so that the next kernel launch's cudaGetLastError() does
  // not report this failure as its own.
  cudaGetLastError();
  STRATA_THROW(Unavailable, what << " failed: " << cudaGetErrorString(status));
}

namespace {
int visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess) return n;
  cudaGetLastError();
  return 0;
}
}  // namespace

void set_device(int device) {
  thread_local int current = -1;
  if (device == current) return;
  const int count = visible_devices();
  STRATA_CHECK(device >= 0 && device < count, Unavailable,
               "cuda:" << device << " does not exist (" << count << " CUDA devices visible)");
  check(cudaSetDevice(device), "cudaSetDevice");
  current = device;
}

cudaStream_t stream(int device) {
  set_device(device);
  // Never destroyed: a tensor in a static object may free its memory on this stream after static destructors ran.
  static std::mutex* mu = new std::mutex;
  static std::vector<cudaStream_t>* all = new std::vector<cudaStream_t>;
  std::vector<cudaStream_t>& streams = *all;
  std::lock_guard<std::mutex> lock(*mu);
  if (streams.size() <= static_cast<size_t>(device)) streams.resize(device + 1, nullptr);
  if (streams[device] == nullptr) check(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking),
                                        "cudaStreamCreateWithFlags");
  return streams[device];
}

void synchronize(int device) { check(cudaStreamSynchronize(stream(device)), "cudaStreamSynchronize"); }

}  // namespace strata::detail::cuda
