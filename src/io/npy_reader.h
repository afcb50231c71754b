// Reading a .npy image from any byte stream (an .npz archive's member, strata/io/npz.h), with read_npy's checks.
// `read(dst, n)` copies the next n bytes into dst and returns how many it could (fewer only at the end); `size` is
// the whole image's size; `name` names it in errors. Thread-safety: no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "strata/io/npy.h"

namespace strata::io::detail {

NpyInfo read_npy_info(const std::function<uint64_t(void*, uint64_t)>& read, uint64_t size, const std::string& name);
Tensor read_npy(const std::function<uint64_t(void*, uint64_t)>& read, uint64_t size, const std::string& name);

}  // namespace strata::io::detail
