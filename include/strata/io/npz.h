// NumPy's .npz archives (numpy.savez: a zip of .npy files, stored; numpy.savez_compressed: deflated), read as
// numpy.load reads them: each member "NAME.npy" is the array NAME. The zip container and inflating are libzip's.
//
//   io::NpzFile npz("mnist.npz");
//   Tensor x = npz.read("x_train");   // [60000, 28, 28] uint8
//
// Each array is checked as read_npy checks a .npy file (strata/io/npy.h) and its errors name "FILE.npz:NAME.npy".
// A file that cannot be opened is IoError; one that is not a zip archive, or a member whose data is damaged (its
// CRC), is DataCorrupt; an array name the archive does not hold is InvalidArgument listing the names it holds.
//
// Thread-safety: an NpzFile is used by one thread at a time (it holds libzip's archive, which is not shared).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/io/npy.h"
#include "strata/tensor.h"

namespace strata::io {

class NpzFile {
 public:
  explicit NpzFile(const std::string& path);
  NpzFile(NpzFile&&) noexcept;
  NpzFile& operator=(NpzFile&&) noexcept;
  ~NpzFile();

  const std::string& path() const;
  // The array names, in the archive's order (numpy.load(...).files); members not named *.npy are not arrays.
  const std::vector<std::string>& keys() const;
  bool has(const std::string& key) const;
  // An array's dtype and shape (its header only is inflated).
  NpyInfo info(const std::string& key);
  Tensor read(const std::string& key);

 private:
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace strata::io
