// An event-file reader of the tests' own, independent of src/ (TFRecord framing with both masked CRC-32Cs checked
// by a bitwise CRC-32C, then TensorFlow's Event / Summary / Value decoded by protobuf field number), so that the
// TensorBoard writer is not its own judge. A bad CRC, a cut record or an unexpected field fails the calling test.
// Thread-safety: plain functions.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata::test {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bit by bit.
inline uint32_t crc32c_reference(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

inline uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

inline uint64_t little_endian(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

// Every record of a TFRecord file; a bad CRC or a cut record fails the test.
inline std::vector<std::string> read_records(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  size_t at = 0;
  while (at < file.size()) {
    EXPECT_GE(file.size() - at, 12u) << path << ": a cut record header at " << at;
    if (file.size() - at < 12) break;
    const std::string length_bytes = file.substr(at, 8);
    const uint64_t length = little_endian(file, at, 8);
    EXPECT_EQ(little_endian(file, at + 8, 4), masked(crc32c_reference(length_bytes)))
        << path << ": length CRC at " << at;
    EXPECT_GE(file.size() - at - 12, length + 4) << path << ": a cut record at " << at;
    if (file.size() - at - 12 < length + 4) break;
    const std::string data = file.substr(at + 12, length);
    EXPECT_EQ(little_endian(file, at + 12 + length, 4), masked(crc32c_reference(data)))
        << path << ": data CRC at " << at;
    records.push_back(data);
    at += 12 + length + 4;
  }
  return records;
}

// Protobuf wire format: the fields of one message as (number, wire type, varint / fixed value, bytes).
struct Field {
  uint32_t number = 0, wire_type = 0;
  uint64_t value = 0;
  std::string bytes;
};

inline uint64_t read_varint(const std::string& m, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0; at < m.size() && shift < 64; shift += 7) {
    const unsigned char b = static_cast<unsigned char>(m[at++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  ADD_FAILURE() << "a varint runs past the message";
  return v;
}

inline std::vector<Field> parse_fields(const std::string& m) {
  std::vector<Field> fields;
  size_t at = 0;
  while (at < m.size()) {
    const uint64_t key = read_varint(m, at);
    Field f{.number = static_cast<uint32_t>(key >> 3), .wire_type = static_cast<uint32_t>(key & 7)};
    if (f.wire_type == 0) {
      f.value = read_varint(m, at);
    } else if (f.wire_type == 1 || f.wire_type == 5) {
      const int n = f.wire_type == 1 ? 8 : 4;
      if (at + n > m.size()) {
        ADD_FAILURE() << "a fixed field runs past the message";
        break;
      }
      f.value = little_endian(m, at, n);
      at += n;
    } else if (f.wire_type == 2) {
      const uint64_t n = read_varint(m, at);
      if (at + n > m.size()) {
        ADD_FAILURE() << "a length-delimited field runs past the message";
        break;
      }
      f.bytes = m.substr(at, n);
      at += n;
    } else {
      ADD_FAILURE() << "wire type " << f.wire_type << " in field " << f.number;
      break;
    }
    fields.push_back(f);
  }
  return fields;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  bool has_summary = false;
  std::vector<std::pair<std::string, float>> values;  // Summary.value: (tag, simple_value)
};

inline Event decode_event(const std::string& record) {
  Event e;
  for (const Field& f : parse_fields(record)) {
    if (f.number == 1 && f.wire_type == 1) {
      std::memcpy(&e.wall_time, &f.value, 8);
    } else if (f.number == 2 && f.wire_type == 0) {
      e.step = static_cast<int64_t>(f.value);
    } else if (f.number == 3 && f.wire_type == 2) {
      e.file_version = f.bytes;
    } else if (f.number == 5 && f.wire_type == 2) {
      e.has_summary = true;
      for (const Field& v : parse_fields(f.bytes)) {
        EXPECT_EQ(v.number, 1u);
        std::string tag;
        std::optional<float> simple;
        for (const Field& vf : parse_fields(v.bytes)) {
          if (vf.number == 1 && vf.wire_type == 2) tag = vf.bytes;
          if (vf.number == 2 && vf.wire_type == 5) {
            const uint32_t bits = static_cast<uint32_t>(vf.value);
            float x;
            std::memcpy(&x, &bits, 4);
            simple = x;
          }
        }
        EXPECT_TRUE(simple.has_value()) << "Value '" << tag << "' has no simple_value";
        e.values.emplace_back(tag, simple.value_or(NAN));
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << f.number << " (wire type " << f.wire_type << ")";
    }
  }
  return e;
}

}  // namespace strata::test
