// CUDA device memory through the CUDA runtime (built only with STRATA_WITH_CUDA). Each device's memory comes from
// its default memory pool through cudaMallocAsync, with the pool's release threshold raised to "never": a freed
// block stays cached in the pool, and the next allocation of the device reuses it without a trip to the driver.
// That pool is the caching allocator (as PyTorch's is, with CUDA's own free lists instead of strata's); a
// DeviceAllocator per device (core/device_allocator.h) keeps strata's counts and names the device when it is full.
// Never managed (unified) memory: a tensor is on the host or on one GPU, and moves between them by explicit copies.
// Allocations, frees and copies are queued on the device's stream (core/cuda/cuda_context.h), so a block freed
// after the kernels that read it is reused only after they ran.
// Thread-safety: the runtime calls are thread-safe; each device's allocator is made once, under a mutex, and lives
// as long as the process.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "core/cuda/cuda_context.h"
#include "core/device_allocator.h"
#include "core/device_memory.h"
#include "strata/device_stats.h"
#include "strata/error.h"

namespace strata::detail {

void record_pinned_use(const void* block, cudaStream_t stream);  // core/cuda/pinned_memory_cuda.cc
int cuda_count();

namespace {

class CudaPool : public MemoryBackend {
 public:
  explicit CudaPool(int device) : device_(device) {
    cuda::set_device(device);
    cuda::check(cudaDeviceGetDefaultMemPool(&pool_, device), "cudaDeviceGetDefaultMemPool");
    uint64_t keep_all = UINT64_MAX;
    cuda::check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_all),
                "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
  }

  void* allocate(size_t nbytes) override {
    cudaStream_t s = cuda::stream(device_);
    void* p = nullptr;
    const cudaError_t status = cudaMallocFromPoolAsync(&p, nbytes, pool_, s);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not a sticky error: clear it, so that the next call does not report it
      return nullptr;
    }
    cuda::check(status, "cudaMallocFromPoolAsync");
    return p;
  }

  void deallocate(void* p, size_t) noexcept override {
    // A free runs in no exception context (a Storage's destructor): an error here has nowhere to go but the next
    // call, and at the process's exit the runtime may already be gone (cudaErrorCudartUnloading).
    try {
      cudaFreeAsync(p, cuda::stream(device_));
    } catch (const Error&) {
    }
  }

  size_t reserved() const override {
    uint64_t bytes = 0;
    cuda::check(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &bytes),
                "cudaMemPoolGetAttribute(cudaMemPoolAttrReservedMemCurrent)");
    return static_cast<size_t>(bytes);
  }

  std::optional<DeviceMemory> device_memory() const override {
    cuda::set_device(device_);
    DeviceMemory m;
    if (cudaMemGetInfo(&m.free, &m.total) != cudaSuccess) {
      cudaGetLastError();
      return std::nullopt;
    }
    return m;
  }

  void release_cached() override {
    cuda::synchronize(device_);  // frees queued on the stream land in the pool first
    cuda::check(cudaMemPoolTrimTo(pool_, 0), "cudaMemPoolTrimTo");
  }

 private:
  int device_;
  cudaMemPool_t pool_ = nullptr;
};

constexpr int kMaxDevices = 64;

// The allocator of `index`, made on first use. Unavailable when the device does not exist.
DeviceAllocator& allocator(int index) {
  STRATA_CHECK(index >= 0 && index < kMaxDevices, Unavailable,
               "cuda:" << index << " does not exist (" << cuda_count() << " CUDA devices visible)");
  // Never destroyed: tensors in static objects may be freed after every static destructor ran.
  static std::atomic<DeviceAllocator*>* slots = new std::atomic<DeviceAllocator*>[kMaxDevices]();
  static std::mutex* mu = new std::mutex;
  if (DeviceAllocator* a = slots[index].load(std::memory_order_acquire)) return *a;
  std::lock_guard<std::mutex> lock(*mu);
  if (DeviceAllocator* a = slots[index].load(std::memory_order_acquire)) return *a;
  auto* a = new DeviceAllocator(Device::cuda(index), std::make_unique<CudaPool>(index));
  slots[index].store(a, std::memory_order_release);
  return *a;
}

int device_of(Device device, const char* op) {
  STRATA_CHECK(!device.is_cpu(), InvalidArgument,
               op << ": host memory is not counted; memory_stats covers CUDA devices (cuda:0, ...)");
  return device.index;
}

}  // namespace

int cuda_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

void* cuda_alloc(size_t nbytes, int index) { return allocator(index).allocate(nbytes); }

void cuda_free(void* p, int index, size_t nbytes) {
  if (p == nullptr) return;
  allocator(index).deallocate(p, nbytes);
}

void cuda_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  const cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                              : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
  const int device = src_device.is_cpu() ? dst_device.index : src_device.index;
  cudaStream_t s = cuda::stream(device);
  if (!src_device.is_cpu() && !dst_device.is_cpu() && src_device.index != dst_device.index) {
    cuda::synchronize(dst_device.index);  // the destination's earlier work on its buffer comes first
    cuda::check(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, s), "cudaMemcpyPeerAsync");
  } else {
    cuda::check(cudaMemcpyAsync(dst, src, nbytes, kind, s), "cudaMemcpyAsync");
  }
  // The host sees the bytes (device to host), and may reuse its buffer (host to device), once the call returns.
  cuda::synchronize(device);
}

void copy_to_device_async(void* dst, Device dst_device, const void* src, const void* block, size_t nbytes) {
  STRATA_CHECK(!dst_device.is_cpu(), InvalidArgument, "copy_to_device_async: the destination is the host");
  if (nbytes == 0) return;
  cudaStream_t s = cuda::stream(dst_device.index);
  cuda::check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
  record_pinned_use(block, s);
}

}  // namespace strata::detail

namespace strata {

MemoryStats memory_stats(Device device) {
  return detail::allocator(detail::device_of(device, "memory_stats")).stats();
}

void reset_peak_memory_stats(Device device) {
  detail::allocator(detail::device_of(device, "reset_peak_memory_stats")).reset_peak();
}

void empty_cache(Device device) { detail::allocator(detail::device_of(device, "empty_cache")).empty_cache(); }

bool built_with_cuda() { return true; }

int cuda_device_count() { return detail::cuda_count(); }

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  cudaGetLastError();
  if (status != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
  return n == 0 ? "no CUDA device visible" : "";
}

CudaVersions cuda_versions() {
  CudaVersions v;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  detail::cuda::check(cudaRuntimeGetVersion(&v.runtime), "cudaRuntimeGetVersion");
  cudaGetLastError();
  return v;
}

CudaDeviceInfo cuda_device_info(int index) {
  detail::cuda::set_device(index);  // Unavailable naming the device when it is not there
  cudaDeviceProp prop{};
  detail::cuda::check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  CudaDeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  detail::cuda::check(cudaMemGetInfo(&info.free_memory, &info.total_memory), "cudaMemGetInfo");
  return info;
}

}  // namespace strata
