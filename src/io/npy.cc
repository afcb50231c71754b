// .npy files (see strata/io/npy.h). The header is a Python dict literal of three known keys, read by a small
// parser that accepts exactly what numpy.save writes (and the spacing variants the format allows) and nothing else.
//
// Thread-safety: no shared state.
#include "strata/io/npy.h"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "io/atomic_file.h"
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

Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in.is_open(), IoError, "cannot open '" << path << "'");
  in.seekg(0, std::ios::end);
  const std::streamoff file_size = in.tellg();
  in.seekg(0);
  unsigned char prefix[12] = {};
  in.read(reinterpret_cast<char*>(prefix), 8);
  STRATA_CHECK(in.gcount() == 8 && std::memcmp(prefix, kMagic, kMagicSize) == 0, DataCorrupt,
               path << ": not a .npy file (it does not start with \"\\x93NUMPY\")");
  const int major = prefix[6], minor = prefix[7];
  STRATA_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, DataCorrupt,
               path << ": unknown .npy format version " << major << "." << minor << " (known: 1.0, 2.0, 3.0)");
  const int length_bytes = major == 1 ? 2 : 4;
  in.read(reinterpret_cast<char*>(prefix + 8), length_bytes);
  STRATA_CHECK(in.gcount() == length_bytes, DataCorrupt, path << ": truncated .npy header");
  const uint64_t header_length = little_endian(prefix + 8, length_bytes);
  const uint64_t data_start = 8 + length_bytes + header_length;
  STRATA_CHECK(data_start <= static_cast<uint64_t>(file_size), DataCorrupt,
               path << ": the .npy header claims " << header_length << " bytes but the file has " << file_size);
  std::string header(header_length, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_length));
  STRATA_CHECK(static_cast<uint64_t>(in.gcount()) == header_length, IoError, "cannot read '" << path << "'");

  std::string descr;
  bool fortran_order = false;
  Shape shape;
  HeaderParser(header, path).parse(&descr, &fortran_order, &shape);
  STRATA_CHECK(!fortran_order, DataCorrupt,
               path << ": the array is in Fortran order; save it in C order (numpy.ascontiguousarray)");
  DType dtype = DType::kFloat32;
  if (descr == "<f4") {
    dtype = DType::kFloat32;
  } else if (descr == "|u1" || descr == "<u1") {
    dtype = DType::kUInt8;
  } else if (descr == "<i4") {
    dtype = DType::kInt32;
  } else if (descr == "<i8") {
    dtype = DType::kInt64;
  } else {
    STRATA_THROW(InvalidArgument, path << ": .npy dtype '" << descr
                                       << "' is not one strata reads; save float32 ('<f4'), uint8 ('|u1'), int32 "
                                          "('<i4') or int64 ('<i8')");
  }
  uint64_t numel = 1;
  for (int64_t d : shape) {
    STRATA_CHECK(d == 0 || numel <= std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d), DataCorrupt,
                 path << ": the .npy shape " << shape_str(shape) << " is too large");
    numel *= static_cast<uint64_t>(d);
  }
  const uint64_t want = numel * dtype_size(dtype);
  const uint64_t have = static_cast<uint64_t>(file_size) - data_start;
  STRATA_CHECK(have == want, DataCorrupt,
               path << ": a " << descr << " array of shape " << shape_str(shape) << " needs " << want
                    << " data bytes, but the file has " << have);
  Tensor t = Tensor::empty(shape, dtype);
  in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(want));
  STRATA_CHECK(static_cast<uint64_t>(in.gcount()) == want, IoError, "cannot read '" << path << "'");
  return t;
}

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
