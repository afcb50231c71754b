// TFRecord files from an independent writer read exactly: tests/data/formats/write_tfrecord.py (Python's
// standard library only, run with /usr/bin/python3) writes the records this test chooses following
// TensorFlow's record format, uncompressed, through Python's gzip (one member with FNAME, and two
// members concatenated) and through zlib; strata reads every record back, byte for byte, on both read
// paths, tells each file's compression from its bytes, and writes the uncompressed file byte-identically.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "data/dataset_test_util.h"
#include "strata/data/tfrecord.h"
#include "strata/data/tfrecord_dataset.h"

namespace strata::data {
namespace {

using test::file_bytes;
using test::put_bytes;
using test::WholeFileLimit;

std::string script_path() {
  const auto beside = std::filesystem::path(__FILE__).parent_path() / "write_tfrecord.py";
  if (std::filesystem::exists(beside)) return beside.string();
  return "tests/data/formats/write_tfrecord.py";  // ctest runs from the source root
}

class PythonWriterTest : public test::ScratchDirTest {
 protected:
  PythonWriterTest() : ScratchDirTest("strata_python_writer_") {}
};

// Empty, one byte, every byte value, records larger than the reader's buffer, and many small ones.
std::vector<std::string> sample_records() {
  std::vector<std::string> records = {"", "a"};
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  records.push_back(all_bytes);
  uint32_t x = 2024;
  for (size_t len : {size_t{300000}, size_t{70000}}) {
    std::string big;
    for (size_t k = 0; k < len; ++k)
      big.push_back(static_cast<char>(k % 4 == 0 ? (x = x * 1103515245u + 12345u) >> 24 : 'a' + k % 11));
    records.push_back(std::move(big));
  }
  for (int i = 0; i < 300; ++i) records.push_back("record-" + std::to_string(i) + std::string(i % 97, 'z'));
  return records;
}

std::string hex_lines(const std::vector<std::string>& records) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const std::string& r : records) {
    for (const char c : r) {
      out.push_back(kDigits[static_cast<unsigned char>(c) >> 4]);
      out.push_back(kDigits[static_cast<unsigned char>(c) & 15]);
    }
    out.push_back('\n');
  }
  return out;
}

std::vector<std::string> read_all(const std::string& path, Compression c) {
  TFRecordReader reader(path, {.compression = c, .buffer_size = 4096});
  std::vector<std::string> out;
  std::string record;
  while (reader.read(&record)) out.push_back(record);
  return out;
}

TEST_F(PythonWriterTest, RecordsFromAnIndependentWriterReadExactly) {
  const auto records = sample_records();
  put_bytes(path("records.hex"), hex_lines(records));
  const std::string command =
      "/usr/bin/python3 " + script_path() + " '" + path("records.hex") + "' '" + path("py") + "' 2>&1";
  std::FILE* p = ::popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) output.append(buf, n);
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << "\n" << output;

  struct File {
    const char* suffix;
    Compression compression;
  };
  for (const File f : {File{".tfrecord", Compression::kNone}, File{".tfrecord.gz", Compression::kGzip},
                       File{".members.gz", Compression::kGzip}, File{".tfrecord.zz", Compression::kZlib}}) {
    SCOPED_TRACE(f.suffix);
    const std::string file = path(std::string("py") + f.suffix);
    EXPECT_EQ(detect_compression(file), f.compression);
    EXPECT_EQ(read_all(file, f.compression), records);
    {
      WholeFileLimit stream(0);  // through zlib's stream as well
      EXPECT_EQ(read_all(file, f.compression), records);
    }
    // And through a dataset, as a pipeline reads it.
    auto it = TFRecordDataset({file}, {.compression = f.compression}).make_iterator();
    size_t n = 0;
    while (auto e = it.next()) {
      ASSERT_LT(n, records.size());
      EXPECT_EQ(tensor_string((*e)[0]), records[n]) << "record " << n;
      ++n;
    }
    EXPECT_EQ(n, records.size());
  }

  // The uncompressed format has one spelling: strata's writer makes the same bytes.
  TFRecordWriter w(path("strata.tfrecord"));
  for (const auto& r : records) w.write(r);
  w.close();
  EXPECT_EQ(file_bytes(path("strata.tfrecord")), file_bytes(path("py.tfrecord")));
}

}  // namespace
}  // namespace strata::data
