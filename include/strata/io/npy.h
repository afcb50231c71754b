// NumPy's .npy files (numpy.save / numpy.load), the format of "Format of .npy files" in NumPy's documentation
// (numpy.lib.format):
//
//   6 bytes   "\x93NUMPY"
//   2 bytes   the format version: major, minor (1.0, 2.0 or 3.0)
//   2 or 4    the header's length H, little-endian: 2 bytes in version 1.0, 4 bytes in 2.0 and 3.0
//   H bytes   a Python dict literal, {'descr': '<f4', 'fortran_order': False, 'shape': (N, 28, 28), }, padded
//             with spaces and ended by '\n' so that the data starts at a multiple of 64 bytes
//   the rest  the elements, row-major (C order)
//
// dtypes: '<f4' float32, '|u1' uint8, '<i4' int32, '<i8' int64 (what strata's Tensor holds; bfloat16 has no
// NumPy descr). Reading is strict: an unknown version, a header that is not exactly those three keys, a big-endian
// or other descr, Fortran order, or a data size other than the shape's is DataCorrupt (or InvalidArgument for a
// dtype strata does not hold) naming the file; a file that cannot be opened or read is IoError.
//
// Thread-safety: the functions share no state. Writes are atomic (a temporary file renamed over the target).
#pragma once

#include <string>

#include "strata/tensor.h"

namespace strata::io {

// Reads a .npy file into a host tensor of its shape and dtype.
Tensor read_npy(const std::string& path);

// What a .npy file holds, from its header (checked as read_npy checks it, the data's size included; the data is
// not read): for sizing a model from its input file.
struct NpyInfo {
  DType dtype = DType::kFloat32;
  Shape shape;
};
NpyInfo read_npy_info(const std::string& path);

// Writes `t` (float32, uint8, int32 or int64; any device, copied to the host) as a version 1.0 .npy file (2.0 when
// the header does not fit 1.0's 65535 bytes). InvalidArgument for an undefined or bfloat16 tensor; IoError when the
// file cannot be written.
void write_npy(const std::string& path, const Tensor& t);

}  // namespace strata::io
