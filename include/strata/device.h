// Where a tensor's storage lives: the host (CPU) or a CUDA device.
// Thread-safety: a plain value.
#pragma once

#include <string>

namespace strata {

struct Device {
  enum class Kind : uint8_t { kCPU, kCUDA };
  Kind kind = Kind::kCPU;
  int index = 0;

  static Device cpu() { return {Kind::kCPU, 0}; }
  static Device cuda(int i = 0) { return {Kind::kCUDA, i}; }
  bool is_cpu() const { return kind == Kind::kCPU; }
  bool operator==(const Device&) const = default;
  // "cpu" or "cuda:0", the spelling TensorFlow users know as "/cpu:0" drops the slash.
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

}  // namespace strata
