// Helpers for the data tests: collecting int64 datasets, checking save/restore at every position, a
// bitwise CRC-32, and a scratch directory per test with whole-file read and write.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "data/compression.h"
#include "strata/data/dataset.h"
#include "test_util.h"

namespace strata::data::test {

using strata::test::message_of;

// A reflected CRC-32 bit by bit (as zlib and TFRecord compute them), continuing the finished `crc`:
// the reference the fast CRCs and hand-written gzip headers are checked with.
inline uint32_t crc_bitwise(uint32_t reflected_poly, uint32_t crc, const char* data, size_t n) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) {
    c ^= static_cast<uint8_t>(data[i]);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? reflected_poly : 0);
  }
  return ~c;
}
inline constexpr uint32_t kGzipReflected = 0xedb88320u, kCastagnoliReflected = 0x82f63b78u;

// A fixture whose tests each get a fresh directory `dir_` (named after the test), removed afterwards.
class ScratchDirTest : public ::testing::Test {
 protected:
  explicit ScratchDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (prefix_ + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void put_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<int64_t> ints(std::initializer_list<int64_t> v) { return std::vector<int64_t>(v); }

// Every element's first component, flattened, as int64 (one value per scalar element).
inline std::vector<int64_t> flatten_ints(const Element& e, size_t component = 0) {
  return e[component].to_vector<int64_t>();
}

inline std::vector<int64_t> drain_ints(Iterator& it, int64_t limit = -1, size_t component = 0) {
  std::vector<int64_t> out;
  while (limit < 0 || static_cast<int64_t>(out.size()) < limit) {
    auto e = it.next();
    if (!e) break;
    for (int64_t v : flatten_ints(*e, component)) out.push_back(v);
  }
  return out;
}

inline std::vector<int64_t> collect_ints(const Dataset& ds, size_t component = 0) {
  auto it = ds.make_iterator();
  return drain_ints(it, -1, component);
}

// Elements (as int64 lists) of a fresh iterator, one vector per element.
inline std::vector<std::vector<int64_t>> collect_elements(const Dataset& ds, int64_t limit = -1) {
  std::vector<std::vector<int64_t>> out;
  auto it = ds.make_iterator();
  while (limit < 0 || static_cast<int64_t>(out.size()) < limit) {
    auto e = it.next();
    if (!e) break;
    out.push_back(flatten_ints(*e));
  }
  return out;
}

// For a stop point k: run k elements, save, restore into a fresh iterator of `make()` (a new Dataset
// object, like a restarted job), and check the rest equals the uninterrupted run.
inline void expect_resumes_exactly(const std::function<Dataset()>& make, int64_t stop_at, int64_t limit = -1) {
  SCOPED_TRACE("stopped after " + std::to_string(stop_at) + " elements");
  const auto full = collect_elements(make(), limit);
  auto it = make().make_iterator();
  std::vector<std::vector<int64_t>> got;
  for (int64_t i = 0; i < stop_at; ++i) {
    auto e = it.next();
    ASSERT_TRUE(e) << "the dataset ended before " << stop_at;
    got.push_back(flatten_ints(*e));
  }
  const std::string state = it.save_state();
  auto resumed = make().make_iterator();
  resumed.restore_state(state);
  while (limit < 0 || static_cast<int64_t>(got.size()) < limit) {
    auto e = resumed.next();
    if (!e) break;
    got.push_back(flatten_ints(*e));
  }
  EXPECT_EQ(got, full);
}

// Sets the whole-file bound for the scope (0: every file streams through zlib).
class WholeFileLimit {
 public:
  explicit WholeFileLimit(uint64_t bytes) : old_(detail::set_whole_file_limit(bytes)) {}
  ~WholeFileLimit() { detail::set_whole_file_limit(old_); }
  WholeFileLimit(const WholeFileLimit&) = delete;
  WholeFileLimit& operator=(const WholeFileLimit&) = delete;

 private:
  uint64_t old_;
};

}  // namespace strata::data::test
