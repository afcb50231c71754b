// What a damaged compressed file can make the whole-file reader allocate: a gzip file's last 4 bytes
// (ISIZE) are the first guess at its inflated size, and a damaged or cut file's are no size at all, so
// no more than deflate's best ratio (1032:1) of the file's bytes is believed (found by fuzzing: a
// 300-byte file made the reader allocate up to 1 GB before failing). The largest array this binary
// asks operator new[] for is recorded by the replacement below (the reader's whole-file buffers are
// arrays): a binary of its own, since the replacement holds for every test in it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "data/dataset_test_util.h"
#include "strata/data/tfrecord.h"

namespace {
std::atomic<size_t> g_largest_array{0};
}  // namespace

void* operator new[](size_t bytes) {
  size_t seen = g_largest_array.load();
  while (bytes > seen && !g_largest_array.compare_exchange_weak(seen, bytes)) {
  }
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace strata::data {
namespace {

using test::file_bytes;
using test::put_bytes;

class InflateAllocationTest : public test::ScratchDirTest {
 protected:
  InflateAllocationTest() : ScratchDirTest("strata_inflate_allocation_") {}
};

TEST_F(InflateAllocationTest, ADamagedGzipSizeIsNotAnAllocation) {
  {
    TFRecordWriter w(path("full"), Compression::kGzip);
    w.write("abc");
    w.write(std::string(300, 'x'));
    w.close();
  }
  std::string bytes = file_bytes(path("full"));
  ASSERT_LT(bytes.size(), 1000u);
  bytes.resize(bytes.size() - 8);
  bytes += std::string("\x00\x00\x00\x00\x00\x00\x00\x06", 8);  // CRC 0, "inflated size" 96 MiB
  put_bytes(path("damaged.tfrecord"), bytes);

  g_largest_array = 0;
  std::string error;
  try {
    TFRecordReader reader(path("damaged.tfrecord"), {.compression = Compression::kGzip});
    std::string record;
    while (reader.read(&record)) {
    }
  } catch (const DataCorrupt& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("damaged.tfrecord"), std::string::npos) << error;
  EXPECT_LE(g_largest_array.load(), 1032 * bytes.size());

  // An intact file's ISIZE is believed: one buffer of exactly its inflated size (no guessing, no growing).
  std::string noise(100000, '\0');
  uint32_t x = 5;
  for (char& c : noise) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24 & 0x3f);
  {
    TFRecordWriter w(path("intact"), Compression::kGzip);
    w.write(noise);
    w.close();
  }
  g_largest_array = 0;
  TFRecordReader intact(path("intact"), {.compression = Compression::kGzip});
  std::string record;
  ASSERT_TRUE(intact.read(&record));
  EXPECT_EQ(record, noise);
  EXPECT_EQ(g_largest_array.load(), 16 + noise.size());  // the file (smaller) and the inflated bytes
}

}  // namespace
}  // namespace strata::data
