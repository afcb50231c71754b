// Helpers for the data tests: collecting int64 datasets, checking save/restore at every position, a
// bitwise CRC-32, a scratch directory per test with whole-file read and write, the files of a directory,
// and a cap on file sizes that makes writes fail part-way (as on a full disk).
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "data/compression/byte_streams.h"
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

// Records "", "a", then n records "record-<i>:" followed by length(i) bytes that compress unevenly: every third a
// byte of a linear congruential sequence from `seed`, the others cycling through the first `letters` letters.
template <class Length>
std::vector<std::string> uneven_records(int n, uint32_t seed, int letters, Length length) {
  std::vector<std::string> records = {"", "a"};
  uint32_t x = seed;
  for (int i = 0; i < n; ++i) {
    std::string r = "record-" + std::to_string(i) + ":";
    const size_t len = length(i);
    for (size_t k = 0; k < len; ++k)
      r.push_back(static_cast<char>(k % 3 == 0 ? (x = x * 1103515245u + 12345u) >> 24 : 'a' + k % letters));
    records.push_back(std::move(r));
  }
  return records;
}

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void put_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The names of the entries of `dir`, sorted.
inline std::vector<std::string> file_names(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// For its scope, files this process writes cannot grow past `bytes` (RLIMIT_FSIZE): a write beyond
// fails with EFBIG, as on a full disk, rather than raising SIGXFSZ (ignored meanwhile).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    EXPECT_EQ(getrlimit(RLIMIT_FSIZE, &old_), 0);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit capped = old_;
    capped.rlim_cur = std::min<rlim_t>(bytes, old_.rlim_max);
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &capped), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  void (*old_handler_)(int) = SIG_DFL;
};

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
