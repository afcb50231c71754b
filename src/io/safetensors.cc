// safetensors files: writing through AtomicFile with a CRC-32C (io/crc32c.h) of every tensor in
// the metadata, and a reader that checks every header field against the file before it trusts it and
// every recorded checksum against the data (see strata/io/safetensors.h for the format).
// Thread-safety: no shared state.
#include "strata/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "core/json_depth.h"
#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "io/tensor_specs.h"

namespace strata::io {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; add byte swapping");

namespace {

using ordered_json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr const char* kMetadataKey = "__metadata__";
constexpr std::string_view kChecksumPrefix = "crc32c:";  // "crc32c:<tensor name>" -> 8 lowercase hex digits

using detail::crc32c;

bool is_checksum_key(const std::string& key) { return key.rfind(kChecksumPrefix, 0) == 0; }

std::string crc_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

// The CRC an 8-hex-digit string holds; none for anything else.
std::optional<uint32_t> parse_crc_hex(const std::string& s) {
  if (s.size() != 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return std::nullopt;
    v = (v << 4) | static_cast<uint32_t>(d);
  }
  return v;
}

// A read-only file descriptor that closes itself.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    STRATA_CHECK(fd_ >= 0, IoError, "cannot open " << path << ": " << detail::errno_message(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      STRATA_THROW(IoError, "cannot stat " << path << ": " << detail::errno_message(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      STRATA_THROW(IoError, "cannot read " << path << ": not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }

  // Reads exactly n bytes at `offset`.
  void read_at(void* out, uint64_t n, uint64_t offset) const {
    char* p = static_cast<char*>(out);
    while (n > 0) {
      const size_t chunk = n < (uint64_t{1} << 30) ? static_cast<size_t>(n) : (size_t{1} << 30);
      const ssize_t r = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      STRATA_CHECK(r >= 0, IoError, "cannot read " << path_ << ": " << detail::errno_message(errno));
      STRATA_CHECK(r > 0, DataCorrupt, path_ << ": file ended while reading (it shrank while being read?)");
      p += r;
      n -= static_cast<uint64_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// n * m, or none on overflow.
std::optional<uint64_t> checked_mul(uint64_t n, uint64_t m) {
  if (m != 0 && n > std::numeric_limits<uint64_t>::max() / m) return std::nullopt;
  return n * m;
}

std::string bytes_str(uint64_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

// Parses and checks the header of `path`; returns the entries in order of their data.
std::vector<Entry> parse_header(const std::string& path, const std::string& header, uint64_t buffer_size,
                                std::map<std::string, std::string>* metadata) {
  STRATA_CHECK(::strata::detail::json_depth(header) <= ::strata::detail::kMaxJsonDepth, DataCorrupt,
               path << ": the safetensors header nests arrays or objects deeper than "
                    << ::strata::detail::kMaxJsonDepth << " levels");
  ordered_json j;
  try {
    j = ordered_json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(DataCorrupt, path << ": the safetensors header is not valid JSON (" << e.what() << ")");
  }
  STRATA_CHECK(j.is_object(), DataCorrupt,
               path << ": the safetensors header is a JSON " << j.type_name() << ", not an object");
  std::vector<Entry> entries;
  for (const auto& [name, value] : j.items()) {
    if (name == kMetadataKey) {
      STRATA_CHECK(value.is_object(), DataCorrupt,
                   path << ": \"__metadata__\" is a JSON " << value.type_name() << ", not an object of strings");
      for (const auto& [key, v] : value.items()) {
        STRATA_CHECK(
            v.is_string(), DataCorrupt,
            path << ": \"__metadata__\" value of '" << key << "' is a JSON " << v.type_name() << ", not a string");
        if (metadata) (*metadata)[key] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    STRATA_CHECK(value.is_object(), DataCorrupt,
                 where << " is described by a JSON " << value.type_name() << ", not an object");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      STRATA_CHECK(value.contains(key), DataCorrupt, where << " has no \"" << key << "\"");
    const auto& dt = value["dtype"];
    STRATA_CHECK(dt.is_string(), DataCorrupt, where << ": \"dtype\" is not a string");
    const auto dtype = detail::dtype_from_code(dt.get<std::string>());
    STRATA_CHECK(dtype.has_value(), DataCorrupt,
                 where << " has dtype \"" << dt.get<std::string>()
                       << "\", which strata does not hold (it reads F32, I32, I64, U8, BF16)");
    Entry e{name, *dtype, {}, 0, 0};
    const auto& shape = value["shape"];
    STRATA_CHECK(shape.is_array(), DataCorrupt, where << ": \"shape\" is not an array");
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : shape) {
      STRATA_CHECK(d.is_number_unsigned(), DataCorrupt,
                   where << ": \"shape\" " << shape.dump() << " holds something other than non-negative integers");
      const auto dim = d.get<uint64_t>();
      STRATA_CHECK(dim <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), DataCorrupt,
                   where << ": dimension " << dim << " is too large");
      const auto next = checked_mul(numel, dim);
      overflow = overflow || !next;
      numel = next.value_or(0);
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& offsets = value["data_offsets"];
    STRATA_CHECK(
        offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
        DataCorrupt, where << ": \"data_offsets\" " << offsets.dump() << " is not [begin, end]");
    e.begin = offsets[0].get<uint64_t>();
    e.end = offsets[1].get<uint64_t>();
    STRATA_CHECK(e.begin <= e.end, DataCorrupt,
                 where << ": data_offsets [" << e.begin << ", " << e.end << "] end before they begin");
    STRATA_CHECK(e.end <= buffer_size, DataCorrupt,
                 where << ": data_offsets [" << e.begin << ", " << e.end << "] run past the end of the data ("
                       << bytes_str(buffer_size) << " after the header)");
    const auto nbytes = overflow ? std::nullopt : checked_mul(numel, dtype_size(*dtype));
    STRATA_CHECK(nbytes && *nbytes == e.end - e.begin, DataCorrupt,
                 where << ": shape " << shape_str(e.shape) << " of " << dt.get<std::string>() << " needs "
                       << (nbytes ? bytes_str(*nbytes) : std::string("more bytes than fit in 64 bits"))
                       << " but data_offsets [" << e.begin << ", " << e.end << "] hold " << bytes_str(e.end - e.begin));
    entries.push_back(std::move(e));
  }
  // The data must be covered exactly: in order of offsets, each tensor starts where the previous ended.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t cursor = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    STRATA_CHECK(e.begin >= cursor, DataCorrupt,
                 path << ": tensor '" << e.name << "' (bytes [" << e.begin << ", " << e.end << "]) overlaps tensor '"
                      << (previous ? previous->name : "") << "' (bytes [" << previous->begin << ", " << previous->end
                      << "])");
    STRATA_CHECK(e.begin == cursor, DataCorrupt,
                 path << ": bytes [" << cursor << ", " << e.begin << ") of the data belong to no tensor (a gap before '"
                      << e.name << "')");
    cursor = e.end;
    if (e.end > e.begin || !previous) previous = &e;
  }
  STRATA_CHECK(cursor == buffer_size, DataCorrupt,
               path << ": the last " << bytes_str(buffer_size - cursor)
                    << " of the data belong to no tensor (the tensors end at " << cursor << " of " << buffer_size
                    << ")");
  return entries;
}

// The header for `tensors` (host copies, already checked to be defined), with the caller's metadata
// followed by one "crc32c:<name>" entry per tensor, in the tensors' order.
std::string build_header(const std::string& path, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata) {
  ordered_json j = ordered_json::object();
  ordered_json m = ordered_json::object();
  for (const auto& [k, v] : metadata) {
    STRATA_CHECK(!is_checksum_key(k), InvalidArgument,
                 "save_safetensors " << path << ": metadata key '" << k
                                     << "' is reserved (\"crc32c:<tensor>\" keys hold the tensors' checksums)");
    m[k] = v;
  }
  for (const auto& [name, t] : tensors)
    m[std::string(kChecksumPrefix) + name] = crc_hex(crc32c(t.raw_data(), t.nbytes()));
  if (!m.empty()) j[kMetadataKey] = std::move(m);
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    ordered_json shape = ordered_json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    j[name] = {{"dtype", safetensors_dtype_code(t.dtype())},
               {"shape", std::move(shape)},
               {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string header;
  try {
    header = j.dump();
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(InvalidArgument, "save_safetensors "
                                      << path << ": a tensor name or metadata string is not valid UTF-8 (" << e.what()
                                      << ")");
  }
  header.append((8 - header.size() % 8) % 8, ' ');  // 8 + N is a multiple of 8: the data starts aligned
  return header;
}

}  // namespace

const char* safetensors_dtype_code(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "F32";
    case DType::kInt32:
      return "I32";
    case DType::kInt64:
      return "I64";
    case DType::kUInt8:
      return "U8";
    case DType::kBFloat16:
      return "BF16";
  }
  return "?";
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Check the names first, then take host copies: the checksums in the header need the bytes.
  std::set<std::string> seen;
  NamedTensors host;
  host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    STRATA_CHECK(!name.empty(), InvalidArgument, "save_safetensors " << path << ": a tensor has an empty name");
    STRATA_CHECK(name != kMetadataKey, InvalidArgument,
                 "save_safetensors " << path << ": \"__metadata__\" is reserved and cannot name a tensor");
    STRATA_CHECK(seen.insert(name).second, InvalidArgument,
                 "save_safetensors " << path << ": two tensors are named '" << name << "'");
    STRATA_CHECK(t.defined(), InvalidArgument, "save_safetensors " << path << ": tensor '" << name << "' is undefined");
    host.emplace_back(name, t.device().is_cpu() ? t : t.to(Device::cpu()));
  }
  const std::string header = build_header(path, host, metadata);
  detail::AtomicFile file(path);
  uint8_t length[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(n >> (8 * i));
  file.write(length, 8);
  file.write(header);
  for (const auto& [name, t] : host)
    if (t.nbytes() > 0) file.write(t.raw_data(), t.nbytes());
  file.commit();
}

NamedTensors load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  InputFile file(path);
  STRATA_CHECK(file.size() >= 8, DataCorrupt,
               path << ": " << bytes_str(file.size()) << " is too short for a safetensors file (8-byte header length)");
  uint8_t length[8];
  file.read_at(length, 8, 0);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(length[i]) << (8 * i);
  STRATA_CHECK(n >= 2, DataCorrupt, path << ": header length " << n << " is too short for a JSON object");
  STRATA_CHECK(n <= kMaxHeaderBytes, DataCorrupt,
               path << ": header length " << n << " is larger than the " << kMaxHeaderBytes << " bytes allowed");
  STRATA_CHECK(n <= file.size() - 8, DataCorrupt,
               path << ": header length " << n << " runs past the end of the file (" << bytes_str(file.size()) << ")");
  std::string header(static_cast<size_t>(n), '\0');
  file.read_at(header.data(), n, 8);
  const uint64_t data_start = 8 + n;
  std::map<std::string, std::string> meta;
  const auto entries = parse_header(path, header, file.size() - data_start, &meta);
  // The checksums: each must name a tensor of the file and be 8 hex digits; they leave the metadata.
  std::unordered_map<std::string, uint32_t> checksums;
  std::set<std::string> names;
  for (const Entry& e : entries) names.insert(e.name);
  for (auto it = meta.begin(); it != meta.end();) {
    if (!is_checksum_key(it->first)) {
      ++it;
      continue;
    }
    const std::string name = it->first.substr(kChecksumPrefix.size());
    STRATA_CHECK(names.count(name), DataCorrupt,
                 path << ": \"__metadata__\" holds checksum '" << it->first << "' for tensor '" << name
                      << "', which the file does not have");
    const auto crc = parse_crc_hex(it->second);
    STRATA_CHECK(crc.has_value(), DataCorrupt,
                 path << ": checksum '" << it->first << "' is \"" << it->second << "\", not 8 hex digits");
    checksums.emplace(name, *crc);
    it = meta.erase(it);
  }
  NamedTensors out;
  out.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (t.nbytes() > 0) file.read_at(t.raw_data(), t.nbytes(), data_start + e.begin);
    if (const auto it = checksums.find(e.name); it != checksums.end()) {
      const uint32_t actual = crc32c(t.raw_data(), t.nbytes());
      STRATA_CHECK(actual == it->second, DataCorrupt,
                   path << ": tensor '" << e.name << "' is damaged: its data (bytes [" << e.begin << ", " << e.end
                        << ") after the header) has CRC-32C " << crc_hex(actual) << " but the file records "
                        << crc_hex(it->second));
    }
    out.emplace_back(e.name, std::move(t));
  }
  if (metadata) *metadata = std::move(meta);
  return out;
}

void check_matches(const NamedTensors& expected, const NamedTensors& loaded, const std::string& what) {
  const auto diff = detail::first_difference(detail::specs_of(expected), detail::specs_of(loaded));
  STRATA_CHECK(!diff, InvalidArgument, what << ": " << *diff);
}

NamedTensors load_safetensors_matching(const std::string& path, const NamedTensors& expected,
                                       std::map<std::string, std::string>* metadata) {
  NamedTensors loaded = load_safetensors(path, metadata);
  check_matches(expected, loaded, path);
  return loaded;
}

namespace detail {

std::vector<TensorSpec> specs_of(const NamedTensors& tensors) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const auto& [name, t] : tensors) specs.push_back({name, t.shape(), t.dtype()});
  return specs;
}

std::string spec_str(const TensorSpec& spec) { return shape_str(spec.shape) + " " + dtype_name(spec.dtype); }

std::optional<std::string> first_difference(const std::vector<TensorSpec>& expected,
                                            const std::vector<TensorSpec>& loaded) {
  std::unordered_map<std::string, const TensorSpec*> by_name;
  for (const auto& s : loaded) by_name.emplace(s.name, &s);
  std::set<std::string> expected_names;
  std::string first;
  int count = 0;
  const auto note = [&](const std::string& d) {
    if (count++ == 0) first = d;
  };
  for (const auto& e : expected) {
    expected_names.insert(e.name);
    const auto it = by_name.find(e.name);
    if (it == by_name.end()) {
      note("tensor '" + e.name + "' (" + spec_str(e) + ") is missing");
    } else if (it->second->shape != e.shape) {
      note("tensor '" + e.name + "' has shape " + shape_str(it->second->shape) + " but " + shape_str(e.shape) +
           " was expected");
    } else if (it->second->dtype != e.dtype) {
      note("tensor '" + e.name + "' has dtype " + dtype_name(it->second->dtype) + " but " + dtype_name(e.dtype) +
           " was expected");
    }
  }
  for (const auto& s : loaded)
    if (!expected_names.count(s.name)) note("unexpected tensor '" + s.name + "' (" + spec_str(s) + ")");
  if (count == 0) return std::nullopt;
  if (count > 1) first += " (the first of " + std::to_string(count) + " differences)";
  return first;
}

std::optional<DType> dtype_from_code(std::string_view code) {
  for (DType d : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kUInt8, DType::kBFloat16})
    if (code == safetensors_dtype_code(d)) return d;
  return std::nullopt;
}

}  // namespace detail
}  // namespace strata::io
