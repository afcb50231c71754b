// .npy files (see strata/io/npy.h). The header is a Python dict literal of three known keys, read by a small
// parser that accepts exactly what numpy.save writes (and the spacing variants the format allows) and nothing else.
//
// Thread-safety: no shared state.
#include "strata/io/npy.h"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "io/npy_reader.h"
#include "strata/error.h"

namespace strata::io {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr size_t kAlignment = 64;

const char* descr_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "<f4";
    case DType::kUInt8: return "|u1";
    case DType::kInt32: return "<i4";
    case DType::kInt64: return "<i8";
    case DType::kBFloat16: break;
  }
  return nullptr;
}

// The header dict's parser: '{' ('key': value ,)* '}' with optional spaces, the last comma optional.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  void parse(std::string* descr, bool* fortran_order, Shape* shape) {
    skip_spaces();
    expect('{');
    bool have_descr = false, have_order = false, have_shape = false;
    for (;;) {
      skip_spaces();
      if (peek() == '}') break;
      const std::string key = quoted();
      skip_spaces();
      expect(':');
      skip_spaces();
      if (key == "descr" && !have_descr) {
        *descr = quoted();
        have_descr = true;
      } else if (key == "fortran_order" && !have_order) {
        *fortran_order = boolean();
        have_order = true;
      } else if (key == "shape" && !have_shape) {
        *shape = tuple();
        have_shape = true;
      } else {
        fail("unexpected or repeated key '" + key + "'");
      }
      skip_spaces();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_spaces();
      if (peek() != '}') fail("expected ',' or '}'");
    }
    expect('}');
    while (i_ < s_.size() && s_[i_] == ' ') ++i_;
    if (i_ + 1 != s_.size() || s_[i_] != '\n') fail("the header must end with spaces and one newline");
    if (!have_descr || !have_order || !have_shape) fail("the header needs 'descr', 'fortran_order' and 'shape'");
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_spaces() {
    while (i_ < s_.size() && s_[i_] == ' ') ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    ++i_;
    const size_t end = s_.find(q, i_);
    if (end == std::string::npos) fail("an unterminated string");
    std::string out = s_.substr(i_, end - i_);
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  Shape tuple() {
    expect('(');
    Shape shape;
    for (;;) {
      skip_spaces();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a dimension");
      int64_t d = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (d > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("a dimension is too large");
        d = d * 10 + (s_[i_++] - '0');
      }
      shape.push_back(d);
      skip_spaces();
      if (peek() == ',') {
        ++i_;
      } else if (peek() != ')') {
        fail("expected ',' or ')' in the shape");
      }
    }
    expect(')');
    return shape;
  }
  [[noreturn]] void fail(const std::string& what) const {
    STRATA_THROW(DataCorrupt, path_ << ": not a valid .npy header (" << what << " at byte " << i_ << " of '" << s_
                                    << "')");
  }

  const std::string& s_;
  const std::string& path_;
  size_t i_ = 0;
};

uint64_t little_endian(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

// A .npy image's bytes from wherever they are (a file, a zip member): `read(dst, n)` fills dst with the next n
// bytes and returns how many it could (fewer only at the end).
namespace {
using ReadFn = std::function<uint64_t(void* dst, uint64_t n)>;

struct Header {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::string descr;
  uint64_t data_bytes = 0;
};

// Reads and checks the header; `total_size` is the whole image's size (the data must fill the rest exactly).
Header read_header(const ReadFn& read, uint64_t total_size, const std::string& path) {
  unsigned char prefix[12] = {};
  STRATA_CHECK(read(prefix, 8) == 8 && std::memcmp(prefix, kMagic, kMagicSize) == 0, DataCorrupt,
               path << ": not a .npy file (it does not start with \"\\x93NUMPY\")");
  const int major = prefix[6], minor = prefix[7];
  STRATA_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, DataCorrupt,
               path << ": unknown .npy format version " << major << "." << minor << " (known: 1.0, 2.0, 3.0)");
  const int length_bytes = major == 1 ? 2 : 4;
  STRATA_CHECK(read(prefix + 8, length_bytes) == static_cast<uint64_t>(length_bytes), DataCorrupt,
               path << ": truncated .npy header");
  const uint64_t header_length = little_endian(prefix + 8, length_bytes);
  const uint64_t data_start = 8 + length_bytes + header_length;
  STRATA_CHECK(data_start <= total_size, DataCorrupt,
               path << ": the .npy header claims " << header_length << " bytes but the file has " << total_size);
  std::string text(header_length, '\0');
  STRATA_CHECK(read(text.data(), header_length) == header_length, IoError, "cannot read '" << path << "'");

  Header h;
  bool fortran_order = false;
  HeaderParser(text, path).parse(&h.descr, &fortran_order, &h.shape);
  STRATA_CHECK(!fortran_order, DataCorrupt,
               path << ": the array is in Fortran order; save it in C order (numpy.ascontiguousarray)");
  const std::string& descr = h.descr;
  if (descr == "<f4") {
    h.dtype = DType::kFloat32;
  } else if (descr == "|u1" || descr == "<u1") {
    h.dtype = DType::kUInt8;
  } else if (descr == "<i4") {
    h.dtype = DType::kInt32;
  } else if (descr == "<i8") {
    h.dtype = DType::kInt64;
  } else {
    STRATA_THROW(InvalidArgument, path << ": .npy dtype '" << descr
                                       << "' is not one strata reads; save float32 ('<f4'), uint8 ('|u1'), int32 "
                                          "('<i4') or int64 ('<i8') (numpy: a.astype('float32'))");
  }
  uint64_t numel = 1;
  for (int64_t d : h.shape) {
    STRATA_CHECK(d == 0 || numel <= std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d), DataCorrupt,
                 path << ": the .npy shape " << shape_str(h.shape) << " is too large");
    numel *= static_cast<uint64_t>(d);
  }
  STRATA_CHECK(numel <= std::numeric_limits<uint64_t>::max() / dtype_size(h.dtype), DataCorrupt,
               path << ": the .npy shape " << shape_str(h.shape) << " is too large");
  h.data_bytes = numel * dtype_size(h.dtype);
  const uint64_t have = total_size - data_start;
  STRATA_CHECK(have == h.data_bytes, DataCorrupt,
               path << ": a " << descr << " array of shape " << shape_str(h.shape) << " needs " << h.data_bytes
                    << " data bytes, but the file has " << have);
  return h;
}

Tensor read_data(const ReadFn& read, const Header& h, const std::string& path) {
  Tensor t = Tensor::empty(h.shape, h.dtype);
  STRATA_CHECK(read(t.raw_data(), h.data_bytes) == h.data_bytes, IoError, "cannot read '" << path << "'");
  return t;
}

// A file opened for reading, as a ReadFn, and its size.
struct FileReader {
  std::ifstream in;
  uint64_t size = 0;
  explicit FileReader(const std::string& path) : in(path, std::ios::binary) {
    STRATA_CHECK(in.is_open(), IoError, "cannot open '" << path << "'");
    in.seekg(0, std::ios::end);
    size = static_cast<uint64_t>(in.tellg());
    in.seekg(0);
  }
  ReadFn fn() {
    return [this](void* dst, uint64_t n) {
      in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
      return static_cast<uint64_t>(in.gcount());
    };
  }
};
}  // namespace

Tensor read_npy(const std::string& path) {
  FileReader file(path);
  const ReadFn read = file.fn();
  return read_data(read, read_header(read, file.size, path), path);
}

NpyInfo read_npy_info(const std::string& path) {
  FileReader file(path);
  const Header h = read_header(file.fn(), file.size, path);
  return {h.dtype, h.shape};
}

namespace detail {
NpyInfo read_npy_info(const std::function<uint64_t(void*, uint64_t)>& read, uint64_t size, const std::string& name) {
  const Header h = read_header(read, size, name);
  return {h.dtype, h.shape};
}
Tensor read_npy(const std::function<uint64_t(void*, uint64_t)>& read, uint64_t size, const std::string& name) {
  return read_data(read, read_header(read, size, name), name);
}
}  // namespace detail

void write_npy(const std::string& path, const Tensor& t) {
  STRATA_CHECK(t.defined(), InvalidArgument, "write_npy: the tensor for '" << path << "' is undefined");
  const char* descr = descr_of(t.dtype());
  STRATA_CHECK(descr != nullptr, InvalidArgument,
               "write_npy: '" << path << "': NumPy has no " << dtype_name(t.dtype()) << "; convert to float32 first");
  const Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  std::ostringstream dict;
  dict << "{'descr': '" << descr << "', 'fortran_order': False, 'shape': (";
  const Shape& shape = host.shape();
  for (size_t i = 0; i < shape.size(); ++i) dict << (i > 0 ? ", " : "") << shape[i];
  dict << (shape.size() == 1 ? ",), }" : "), }");  // Python's one-element tuple is "(5,)"
  std::string header = dict.str();
  // magic (6) + version (2) + the length (2 bytes in 1.0, 4 in 2.0), then the header padded to the alignment.
  auto padded_length = [&header](size_t prefix) {
    return (prefix + header.size() + 1 + kAlignment - 1) / kAlignment * kAlignment - prefix;
  };
  const bool version1 = padded_length(10) <= 65535;
  const size_t length = padded_length(version1 ? 10 : 12);
  header.append(length - header.size() - 1, ' ');
  header.push_back('\n');
  std::string bytes(kMagic, kMagicSize);
  bytes.push_back(static_cast<char>(version1 ? 1 : 2));
  bytes.push_back(0);
  for (size_t i = 0; i < (version1 ? 2u : 4u); ++i) bytes.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  bytes += header;
  detail::AtomicFile file(path);
  file.write(bytes);
  file.write(host.raw_data(), host.nbytes());
  file.commit();
}

}  // namespace strata::io
