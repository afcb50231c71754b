// `strata data convert` and `strata data inspect` on a tiny synthetic IDX data set: shard layout (and no
// temporary file left), the Example schema read back through make_example_dataset, inspect's report and
// its exit status 1 for a file with a corrupt record or with no record at all.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "strata/data/idx.h"
#include "strata/data/tfrecord_dataset.h"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

class DataCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_data_cmd_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "idx");
    // 10 train and 3 test images of 5x4 pixels; pixel (n, r, c) = n * 20 + r * 4 + c, label n % 10.
    for (const auto& [prefix, n] : {std::pair<std::string, int64_t>{"train", 10}, {"t10k", 3}}) {
      Tensor images = Tensor::empty({n, 5, 4}, DType::kUInt8);
      Tensor labels = Tensor::empty({n}, DType::kUInt8);
      for (int64_t i = 0; i < n * 20; ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>(i);
      for (int64_t i = 0; i < n; ++i) labels.data<uint8_t>()[i] = static_cast<uint8_t>((i * 7) % 10);
      data::write_idx((dir_ / "idx" / (prefix + "-images-idx3-ubyte")).string(), images, /*gzip=*/prefix == "train");
      data::write_idx((dir_ / "idx" / (prefix + "-labels-idx1-ubyte")).string(), labels);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `strata <args>` and returns what it printed; CLI errors propagate.
  std::string run(const std::string& args) {
    CLI::App app{"strata", "strata"};
    app.require_subcommand(1);
    add_data_commands(app);
    std::ostringstream out;
    auto* old = std::cout.rdbuf(out.rdbuf());
    try {
      app.parse(args, false);
    } catch (...) {
      std::cout.rdbuf(old);
      last_output_ = out.str();
      throw;
    }
    std::cout.rdbuf(old);
    return out.str();
  }
  std::string p(const std::string& rel) const { return (dir_ / rel).string(); }

  fs::path dir_;
  std::string last_output_;
};

TEST_F(DataCommandTest, ConvertWritesShardsThatReadBack) {
  const std::string out =
      run("data convert --from idx " + p("idx") + " --to tfrecord " + p("tf") + " --shards 3 --compression gzip");
  EXPECT_NE(out.find("wrote 10 train records to 3 shards"), std::string::npos) << out;
  EXPECT_NE(out.find("wrote 3 test records"), std::string::npos) << out;
  std::vector<std::string> shards;
  for (int s = 0; s < 3; ++s) shards.push_back(p("tf/train-0000" + std::to_string(s) + "-of-00003.tfrecord.gz"));
  for (const auto& s : shards) ASSERT_TRUE(fs::exists(s)) << s;
  ASSERT_TRUE(fs::exists(p("tf/test-00002-of-00003.tfrecord.gz")));
  int files = 0;
  for (const auto& e : fs::directory_iterator(p("tf"))) {  // the shards, each renamed into place: no *.tmp-*
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    ++files;
  }
  EXPECT_EQ(files, 6);

  auto ds = data::make_example_dataset(shards, data::fashion_mnist_example_spec(5, 4),
                                       {.compression = data::Compression::kGzip});
  auto it = ds.make_iterator();
  int64_t n = 0;
  while (auto e = it.next()) {
    const Tensor& image = (*e)["image"];
    ASSERT_EQ(image.shape(), (Shape{5, 4, 1}));
    for (int64_t i = 0; i < 20; ++i) ASSERT_EQ(image.data<uint8_t>()[i], static_cast<uint8_t>(n * 20 + i));
    EXPECT_EQ((*e)["label"].item<int64_t>(), (n * 7) % 10);
    ++n;
  }
  EXPECT_EQ(n, 10);
  // Contiguous shards: 3, 3 and 4 records.
  EXPECT_EQ(data::TFRecordReader(shards[0], {.compression = data::Compression::kGzip}).offset(), 0u);
  int64_t counts[3] = {};
  for (int s = 0; s < 3; ++s) {
    data::TFRecordReader r(shards[static_cast<size_t>(s)], {.compression = data::Compression::kGzip});
    std::string rec;
    while (r.read(&rec)) ++counts[s];
  }
  EXPECT_EQ(counts[0], 3);
  EXPECT_EQ(counts[1], 3);
  EXPECT_EQ(counts[2], 4);
}

TEST_F(DataCommandTest, InspectReportsCountsFeaturesAndCompression) {
  run("data convert --from idx " + p("idx") + " --to tfrecord " + p("tf") + " --split test");
  EXPECT_FALSE(fs::exists(p("tf/train-00000-of-00001.tfrecord")));
  const std::string out = run("data inspect " + p("tf/test-00000-of-00001.tfrecord"));
  EXPECT_NE(out.find("compression: none (detected)"), std::string::npos) << out;
  EXPECT_NE(out.find("records: 3"), std::string::npos) << out;
  EXPECT_NE(out.find("image: bytes_list [1], 20 bytes each"), std::string::npos) << out;
  EXPECT_NE(out.find("label: int64_list [1]"), std::string::npos) << out;
  EXPECT_NE(out.find("corrupt records: 0"), std::string::npos) << out;

  run("data convert --from idx " + p("idx") + " --to tfrecord " + p("z") + " --split test --compression zlib");
  EXPECT_NE(run("data inspect " + p("z/test-00000-of-00001.tfrecord.zz")).find("compression: ZLIB (detected)"),
            std::string::npos);
}

TEST_F(DataCommandTest, InspectFindsCorruptRecordsAndFails) {
  run("data convert --from idx " + p("idx") + " --to tfrecord " + p("tf") + " --split train");
  const std::string file = p("tf/train-00000-of-00001.tfrecord");
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] ^= 0x55;
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  try {
    run("data inspect " + file);
    FAIL() << "inspect should fail on a corrupt file";
  } catch (const CLI::RuntimeError& e) {
    EXPECT_EQ(e.get_exit_code(), 1);
  }
  EXPECT_NE(last_output_.find("corrupt records: 1 (first: " + file + ": corrupt record 5 (0-based index in the file) "
                              "at byte offset"),
            std::string::npos)
      << last_output_;
  EXPECT_NE(last_output_.find("records: 9"), std::string::npos) << last_output_;
}

TEST_F(DataCommandTest, InspectFailsOnAFileWithoutRecords) {
  // Two shards, the second cut to 0 bytes (an interrupted conversion of an older strata).
  run("data convert --from idx " + p("idx") + " --to tfrecord " + p("tf") + " --split train --shards 2");
  const std::string whole = p("tf/train-00000-of-00002.tfrecord"), empty = p("tf/train-00001-of-00002.tfrecord");
  std::ofstream(empty, std::ios::trunc).close();
  EXPECT_EQ(run("data inspect " + whole).find("holds no record"), std::string::npos);
  try {
    run("data inspect " + whole + " " + empty);
    FAIL() << "inspect should fail on a file without records";
  } catch (const CLI::RuntimeError& e) {
    EXPECT_EQ(e.get_exit_code(), 1);
  }
  const size_t at = last_output_.find(empty + "\n");
  ASSERT_NE(at, std::string::npos) << last_output_;
  EXPECT_NE(last_output_.find("  records: 0\n  error: the file holds no record (a conversion cut short?)", at),
            std::string::npos)
      << last_output_;
  EXPECT_NE(last_output_.find("records: 5"), std::string::npos) << last_output_;  // the other file is reported
}

TEST_F(DataCommandTest, CompressionFlagsReachTheWriter) {
  // The defaults (level 9, filtered) and two other settings each give a different file with the same records.
  run("data convert --from idx " + p("idx") + " --to tfrecord " + p("d") + " --split train --compression gzip");
  run("data convert --from idx " + p("idx") + " --to tfrecord " + p("h") +
      " --split train --compression gzip --compression-strategy huffman_only");
  run("data convert --from idx " + p("idx") + " --to tfrecord " + p("s") +
      " --split train --compression gzip --compression-level 0");
  auto bytes_of = [&](const std::string& dir) {
    std::ifstream in(p(dir + "/train-00000-of-00001.tfrecord.gz"), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto records_of = [&](const std::string& dir) {
    data::TFRecordReader r(p(dir + "/train-00000-of-00001.tfrecord.gz"), {.compression = data::Compression::kGzip});
    std::vector<std::string> out;
    std::string rec;
    while (r.read(&rec)) out.push_back(rec);
    return out;
  };
  EXPECT_EQ(records_of("d").size(), 10u);
  EXPECT_EQ(records_of("h"), records_of("d"));
  EXPECT_EQ(records_of("s"), records_of("d"));
  EXPECT_NE(bytes_of("h"), bytes_of("d"));
  EXPECT_GT(bytes_of("s").size(), bytes_of("d").size());

  EXPECT_THROW(run("data convert --from idx " + p("idx") + " --to tfrecord " + p("x") + " --compression gzip "
                   "--compression-strategy lz4"),
               InvalidArgument);
  EXPECT_THROW(run("data convert --from idx " + p("idx") + " --to tfrecord " + p("x") + " --compression gzip "
                   "--compression-level 10"),
               InvalidArgument);
}

TEST_F(DataCommandTest, BadArgumentsAreClearErrors) {
  EXPECT_THROW(run("data convert --from csv " + p("idx") + " --to tfrecord " + p("tf")), InvalidArgument);
  EXPECT_THROW(run("data convert --from idx " + p("idx") + " --to tfrecord " + p("tf") + " --compression lz4"),
               InvalidArgument);
  EXPECT_THROW(run("data convert --from idx " + p("nowhere") + " --to tfrecord " + p("tf")), IoError);
  EXPECT_THROW(run("data convert --from idx " + p("idx")), CLI::RequiredError);
}

}  // namespace
}  // namespace strata::cli
