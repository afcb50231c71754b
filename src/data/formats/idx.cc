// IDX reading and writing through zlib's gz* functions (they read plain files transparently).
// Thread-safety: pure functions; each call opens its own file.
#include "strata/data/idx.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

namespace strata::data {

namespace {

// The most deflate can expand its input (RFC 1951: a 258-byte match per 2 bits, rounded up as zlib's docs say).
constexpr uint64_t kMaxDeflateRatio = 1032;

struct GzFile {
  gzFile f = nullptr;
  ~GzFile() {
    if (f) gzclose(f);
  }
};

// Reads exactly n bytes or throws DataCorrupt naming the file and what was read.
void read_exact(gzFile f, void* out, size_t n, const std::string& path, const char* what) {
  char* p = static_cast<char*>(out);
  size_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, size_t{1} << 30));
    const int got = gzread(f, p + done, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      STRATA_THROW(DataCorrupt, "read_idx: " << path << ": " << what << ": " << (msg ? msg : "read error"));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  STRATA_CHECK(done == n, DataCorrupt,
               "read_idx: " << path << " is truncated: " << what << " wants " << n << " bytes, found " << done);
}

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

template <class T>
T load_be(const unsigned char* p) {
  unsigned char b[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) b[i] = p[sizeof(T) - 1 - i];
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

template <class Src, class Dst>
void convert_be(const std::vector<unsigned char>& raw, Dst* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Dst>(load_be<Src>(raw.data() + i * sizeof(Src)));
}

}  // namespace

Tensor read_idx(const std::string& path) {
  STRATA_CHECK(std::filesystem::exists(path), IoError, "read_idx: " << path << " does not exist");
  GzFile file;
  file.f = gzopen(path.c_str(), "rb");
  STRATA_CHECK(file.f != nullptr, IoError, "read_idx: cannot open " << path);
  gzbuffer(file.f, 1 << 18);
  unsigned char magic[4];
  read_exact(file.f, magic, 4, path, "the magic number");
  STRATA_CHECK(magic[0] == 0 && magic[1] == 0, DataCorrupt,
               "read_idx: " << path << " is not an IDX file (its magic number does not start with two zero bytes)");
  const int type = magic[2], ndims = magic[3];
  STRATA_CHECK(ndims >= 1 && ndims <= 16, DataCorrupt, "read_idx: " << path << " claims " << ndims << " dimensions");
  std::vector<unsigned char> dim_bytes(static_cast<size_t>(4 * ndims));
  read_exact(file.f, dim_bytes.data(), dim_bytes.size(), path, "the dimensions");
  Shape shape;
  int64_t numel = 1;
  for (int i = 0; i < ndims; ++i) {
    const int64_t d = be32(dim_bytes.data() + 4 * i);
    STRATA_CHECK(d >= 0 && d < (int64_t{1} << 31), DataCorrupt, "read_idx: " << path << " has dimension " << d);
    shape.push_back(d);
    STRATA_CHECK(d == 0 || numel < (int64_t{1} << 40) / d, DataCorrupt,
                 "read_idx: " << path << " claims too many elements");  // (checked before multiplying: no overflow)
    numel *= d;
  }
  size_t elem = 0;
  DType dtype = DType::kUInt8;
  switch (type) {
    case 0x08: elem = 1; dtype = DType::kUInt8; break;
    case 0x09: elem = 1; dtype = DType::kInt32; break;
    case 0x0B: elem = 2; dtype = DType::kInt32; break;
    case 0x0C: elem = 4; dtype = DType::kInt32; break;
    case 0x0D: elem = 4; dtype = DType::kFloat32; break;
    case 0x0E: elem = 8; dtype = DType::kFloat32; break;
    default: STRATA_THROW(DataCorrupt, "read_idx: " << path << " has unknown element type 0x" << std::hex << type);
  }
  // The data the header claims must fit in the file before anything is allocated for it: a plain file holds it
  // whole, and deflate expands at most kMaxDeflateRatio:1, so a gzipped file holds at least that share of it.
  const size_t bytes = static_cast<size_t>(numel) * elem;
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (!ec) {
    const uint64_t header = 4 + dim_bytes.size();
    const bool plain = gzdirect(file.f) == 1;
    const uint64_t most = plain ? (file_bytes > header ? file_bytes - header : 0) : file_bytes * kMaxDeflateRatio;
    STRATA_CHECK(bytes <= most, DataCorrupt,
                 "read_idx: " << path << " is truncated: its header claims " << numel << " elements (" << bytes
                              << " bytes of data), more than its " << file_bytes << (plain ? "" : " gzipped")
                              << " bytes can hold");
  }
  Tensor out = Tensor::empty(shape, dtype);
  if (type == 0x08) {
    read_exact(file.f, out.raw_data(), bytes, path, "the data");
    return out;
  }
  std::vector<unsigned char> raw(bytes);
  read_exact(file.f, raw.data(), bytes, path, "the data");
  switch (type) {
    case 0x09: convert_be<int8_t>(raw, out.data<int32_t>(), numel); break;
    case 0x0B: convert_be<int16_t>(raw, out.data<int32_t>(), numel); break;
    case 0x0C: convert_be<int32_t>(raw, out.data<int32_t>(), numel); break;
    case 0x0D: convert_be<float>(raw, out.data<float>(), numel); break;
    case 0x0E: convert_be<double>(raw, out.data<float>(), numel); break;
  }
  return out;
}

void write_idx(const std::string& path, const Tensor& t, bool gzip) {
  STRATA_CHECK(t.defined() && t.device().is_cpu() && t.rank() >= 1 && t.rank() <= 255, InvalidArgument,
               "write_idx: " << path << ": want a defined host tensor of rank 1..255");
  unsigned char type = 0;
  switch (t.dtype()) {
    case DType::kUInt8: type = 0x08; break;
    case DType::kInt32: type = 0x0C; break;
    case DType::kFloat32: type = 0x0D; break;
    default: STRATA_THROW(InvalidArgument, "write_idx: " << path << ": IDX has no " << dtype_name(t.dtype()));
  }
  std::vector<unsigned char> bytes = {0, 0, type, static_cast<unsigned char>(t.rank())};
  for (int64_t d : t.shape()) {
    STRATA_CHECK(d <= std::numeric_limits<int32_t>::max(), InvalidArgument, "write_idx: dimension " << d << " too big");
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<unsigned char>((d >> s) & 0xff));
  }
  const size_t esize = dtype_size(t.dtype());
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i)
    for (size_t b = 0; b < esize; ++b) bytes.push_back(p[i * esize + (esize - 1 - b)]);  // big-endian
  GzFile file;
  file.f = gzopen(path.c_str(), gzip ? "wb6" : "wbT");
  STRATA_CHECK(file.f != nullptr, IoError, "write_idx: cannot create " << path);
  const int wrote = gzwrite(file.f, bytes.data(), static_cast<unsigned>(bytes.size()));
  STRATA_CHECK(wrote == static_cast<int>(bytes.size()), IoError, "write_idx: short write to " << path);
  const int rc = gzclose(file.f);
  file.f = nullptr;
  STRATA_CHECK(rc == Z_OK, IoError, "write_idx: closing " << path << " failed");
}

}  // namespace strata::data
