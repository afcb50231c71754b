// TFRecordDataset and make_example_dataset: order with 1 and n parallel reads, save/restore at every
// position, corrupt records raised or skipped and counted (numbered within their file, also after a
// restore), files without a record reported once per dataset, and Example parsing with named elements.
#include "strata/data/tfrecord_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/dataset_test_util.h"
#include "test_util.h"

namespace strata::data {
namespace {


class TFRecordDatasetTest : public test::ScratchDirTest {
 protected:
  TFRecordDatasetTest() : ScratchDirTest("strata_tfrecord_ds_") {}

  // File f holds records "f:0" ... "f:<sizes[f]-1>" as Examples {id: int64 f*1000+i, pix: bytes}.
  std::vector<std::string> write_files(const std::vector<int>& sizes, Compression c = Compression::kNone) {
    std::vector<std::string> files;
    for (size_t f = 0; f < sizes.size(); ++f) {
      files.push_back((dir_ / ("shard-" + std::to_string(f))).string());
      TFRecordWriter w(files.back(), c);
      for (int i = 0; i < sizes[f]; ++i) {
        Example ex;
        ex.set_int64s("id", {static_cast<int64_t>(f) * 1000 + i})
            .set_bytes("pix", std::string(4, static_cast<char>(i)));
        w.write(ex.serialize());
      }
      w.close();
    }
    return files;
  }
};

std::vector<int64_t> ids(const Dataset& ds) {
  std::vector<int64_t> out;
  auto it = ds.make_iterator();
  while (auto e = it.next()) out.push_back((*e)["id"].item<int64_t>());
  return out;
}

ExampleSpec spec() {
  return {{"id", FixedLenFeature(FeatureType::kInt64)}, {"pix", RawBytesFeature(DType::kUInt8, {2, 2})}};
}

TEST_F(TFRecordDatasetTest, RecordsInFileOrder) {
  const auto files = write_files({3, 2});
  auto ds = TFRecordDataset(files);
  auto it = ds.make_iterator();
  std::vector<int64_t> got;
  while (auto e = it.next()) {
    ASSERT_EQ(e->size(), 1u);
    got.push_back(Example::parse(tensor_string((*e)[0])).find("id")->int64s[0]);
  }
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 2, 1000, 1001}));
  EXPECT_EQ(ids(make_example_dataset(files, spec())), got);
}

TEST_F(TFRecordDatasetTest, ExampleElementsAreNamedAndDecoded) {
  const auto files = write_files({2}, Compression::kGzip);
  auto it = make_example_dataset(files, spec(), {.compression = Compression::kGzip}).make_iterator();
  auto e = it.next();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->names(), (std::vector<std::string>{"id", "pix"}));
  e = it.next();
  EXPECT_EQ((*e)["pix"].shape(), (Shape{2, 2}));
  EXPECT_EQ((*e)["pix"].to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_FALSE(it.next());
}

TEST_F(TFRecordDatasetTest, ParallelReadsInterleaveRoundRobin) {
  const auto files = write_files({3, 1, 2, 2, 0});
  // Slot 0 reads files 0, 2, 4; slot 1 reads files 1, 3.
  const std::vector<int64_t> want = {0, 1000, 1, 3000, 2, 3001, 2000, 2001};
  for (int rep = 0; rep < 3; ++rep)
    EXPECT_EQ(ids(make_example_dataset(files, spec(), {.num_parallel_reads = 2})), want);
  // More reads than files, and every record exactly once.
  auto all = ids(make_example_dataset(files, spec(), {.num_parallel_reads = 8}));
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 1000, 2000, 2001, 3000, 3001}));
}

TEST_F(TFRecordDatasetTest, SaveAndRestoreAtEveryPosition) {
  const auto files = write_files({5, 3, 4}, Compression::kZlib);
  for (int64_t reads : {1, 2, 3}) {
    SCOPED_TRACE("num_parallel_reads " + std::to_string(reads));
    const auto make = [&] {
      return make_example_dataset(files, spec(), {.compression = Compression::kZlib, .num_parallel_reads = reads});
    };
    const auto full = ids(make());
    ASSERT_EQ(full.size(), 12u);
    for (size_t stop = 0; stop <= full.size(); ++stop) {
      auto it = make().make_iterator();
      for (size_t i = 0; i < stop; ++i) ASSERT_TRUE(it.next());
      const std::string state = it.save_state();
      auto resumed = make().make_iterator();
      resumed.restore_state(state);
      std::vector<int64_t> rest;
      while (auto e = resumed.next()) rest.push_back((*e)["id"].item<int64_t>());
      EXPECT_EQ(rest, std::vector<int64_t>(full.begin() + static_cast<long>(stop), full.end())) << "stop " << stop;
      // The first iterator goes on unaffected by saving.
      std::vector<int64_t> own;
      while (auto e = it.next()) own.push_back((*e)["id"].item<int64_t>());
      EXPECT_EQ(own, rest);
    }
  }
}

TEST_F(TFRecordDatasetTest, CorruptRecordsRaiseOrAreCounted) {
  auto files = write_files({4, 4});
  // Damage the data of record 1 of file 1.
  std::fstream f(files[1], std::ios::in | std::ios::out | std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  TFRecordReader probe(files[1]);
  std::string r;
  probe.read(&r);
  const uint64_t second = probe.offset();
  bytes[second + 14] ^= 1;
  f.seekp(0);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();

  for (int64_t reads : {1, 2}) {
    const std::string msg =
        test::message_of<DataCorrupt>([&] { ids(make_example_dataset(files, spec(), {.num_parallel_reads = reads})); });
    EXPECT_NE(msg.find(files[1]), std::string::npos) << msg;
    EXPECT_NE(msg.find("byte offset " + std::to_string(second)), std::string::npos) << msg;

    auto counter = std::make_shared<std::atomic<int64_t>>(0);
    const auto got = ids(make_example_dataset(
        files, spec(), {.num_parallel_reads = reads, .skip_corrupt = true, .corrupt_records = counter}));
    EXPECT_EQ(got.size(), 7u);
    EXPECT_EQ(std::count(got.begin(), got.end(), 1001), 0);
    EXPECT_EQ(counter->load(), 1);
  }
}

TEST_F(TFRecordDatasetTest, ACorruptRecordAfterARestoreIsNumberedInItsFile) {
  auto files = write_files({6});
  std::string bytes = test::file_bytes(files[0]);
  TFRecordReader probe(files[0]);
  std::string r;
  for (int i = 0; i < 4; ++i) probe.read(&r);
  const uint64_t fifth = probe.offset();
  bytes[fifth + 14] ^= 1;  // record 4's data
  test::put_bytes(files[0], bytes);
  const Dataset ds = TFRecordDataset(files);
  auto it = ds.make_iterator();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(it.next());
  auto resumed = ds.make_iterator();
  resumed.restore_state(it.save_state());
  ASSERT_TRUE(resumed.next());  // record 3
  const std::string msg = test::message_of<DataCorrupt>([&] { resumed.next(); });
  EXPECT_NE(msg.find(files[0] + ": corrupt record 4 (0-based index in the file) at byte offset " +
                     std::to_string(fifth)),
            std::string::npos)
      << msg;
}

TEST_F(TFRecordDatasetTest, AFileWithoutRecordsIsReportedOncePerDataset) {
  const auto files = write_files({2, 0, 3, 0});  // files 1 and 3 are 0-byte files (a conversion cut short)
  ASSERT_EQ(std::filesystem::file_size(files[1]), 0u);
  const std::string warning = "strata: warning: TFRecord shard '" + files[1] + "' holds no record (a file of 0 bytes)\n";
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  for (int64_t reads : {1, 2}) {
    SCOPED_TRACE("parallel reads " + std::to_string(reads));
    const Dataset ds = make_example_dataset(files, spec(), {.num_parallel_reads = reads});
    testing::internal::CaptureStderr();
    const auto first = ids(ds);   // epoch 1
    const auto second = ids(ds);  // epoch 2: a new iterator of the same dataset
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(first.size(), 5u);
    EXPECT_EQ(second, first);
    EXPECT_EQ(count(err, warning), 1u) << err;
    EXPECT_EQ(count(err, "holds no record"), 2u) << err;  // files[1] and files[3], once each
  }
  // A new dataset of the same files reports them again; so does one restored at the start of the file.
  const Dataset again = TFRecordDataset(files);
  testing::internal::CaptureStderr();
  auto it = again.make_iterator();
  ASSERT_TRUE(it.next());
  ASSERT_TRUE(it.next());
  auto resumed = again.make_iterator();
  resumed.restore_state(it.save_state());
  while (resumed.next()) {
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err, warning), 1u) << err;

  // A GZIP file of no record (an empty stream, not 0 bytes) is reported too, with its size.
  const auto gz = write_files({1, 0}, Compression::kGzip);
  testing::internal::CaptureStderr();
  auto gz_it = TFRecordDataset(gz, {.compression = Compression::kGzip}).make_iterator();
  ASSERT_TRUE(gz_it.next());
  EXPECT_FALSE(gz_it.next());
  const std::string gz_err = testing::internal::GetCapturedStderr();
  EXPECT_NE(gz_err.find("strata: warning: TFRecord shard '" + gz[1] + "' holds no record (a file of " +
                        std::to_string(std::filesystem::file_size(gz[1])) + " bytes)"),
            std::string::npos)
      << gz_err;
}

TEST_F(TFRecordDatasetTest, BadFeaturesNameTheRecord) {
  const auto files = write_files({3});
  const ExampleSpec wrong = {{"id", FixedLenFeature(FeatureType::kFloat)}};
  const std::string msg = test::message_of<InvalidArgument>([&] { ids(make_example_dataset(files, wrong)); });
  EXPECT_NE(msg.find("'id' is a int64_list"), std::string::npos) << msg;
  EXPECT_NE(msg.find("record 0 (byte offset 0) of " + files[0]), std::string::npos) << msg;
  EXPECT_THROW(make_example_dataset(files, {{"pix", VarLenFeature(FeatureType::kBytes)}}), InvalidArgument);
  EXPECT_THROW(TFRecordDataset(files, {.num_parallel_reads = 0}), InvalidArgument);
}

// A batch's components as int64 (id) and int64-widened (pix, scale, fill) lists.
std::vector<std::vector<int64_t>> batch_values(const Element& b) {
  std::vector<std::vector<int64_t>> out;
  for (const Tensor& t : b.components())
    out.push_back(t.dtype() == DType::kFloat32 ? std::vector<int64_t>(t.numel(), -1) : t.to_vector<int64_t>());
  for (size_t c = 0; c < b.size(); ++c)
    if (b[c].dtype() == DType::kFloat32)
      for (int64_t i = 0; i < b[c].numel(); ++i) out[c][i] = static_cast<int64_t>(b[c].data<float>()[i] * 10);
  return out;
}

std::vector<std::vector<std::vector<int64_t>>> all_batches(Iterator& it) {
  std::vector<std::vector<std::vector<int64_t>>> out;
  while (auto b = it.next()) out.push_back(batch_values(*b));
  return out;
}

TEST_F(TFRecordDatasetTest, RowsThroughShuffleAndBatchMatchElements) {
  // make_example_dataset -> shuffle -> batch moves fixed-size records as rows (parsed straight into
  // the shuffle slab, copied straight into the batch); a map in between makes every stage use
  // Elements. Both must give the same batches, also with defaults filled in, and resume exactly.
  const auto files = write_files({7, 5, 9, 0, 4}, Compression::kGzip);
  ExampleSpec with_defaults = spec();
  with_defaults["fill"] = FixedLenFeature(FeatureType::kInt64, {2}, Feature::of_int64s({7, 8}));
  with_defaults["scale"] = FixedLenFeature(FeatureType::kFloat, {}, Feature::of_floats({0.5f}));
  // Sorted first: 3 bytes ahead of the int64s (rows keep those aligned; UBSan checks).
  with_defaults["b_odd"] = RawBytesFeature(DType::kUInt8, {3});
  with_defaults["b_odd"].default_value = Feature::of_bytes({"xyz"});
  for (int64_t reads : {1, 2, 3}) {
    SCOPED_TRACE("num_parallel_reads " + std::to_string(reads));
    const auto source = [&] {
      return make_example_dataset(files, with_defaults,
                                  {.compression = Compression::kGzip, .num_parallel_reads = reads});
    };
    const auto make = [&] { return source().shuffle(6, 3).batch(4); };
    auto rows = make().make_iterator();
    auto elements = source().map([](const Element& e) { return e; }).shuffle(6, 3).batch(4).make_iterator();
    const auto want = all_batches(elements);
    ASSERT_EQ(want.size(), 7u);
    // The spec is sorted by name: b_odd, fill, id, pix, scale.
    EXPECT_EQ(want[0][0], (std::vector<int64_t>{'x', 'y', 'z', 'x', 'y', 'z', 'x', 'y', 'z', 'x', 'y', 'z'}));
    EXPECT_EQ(want[0][1], (std::vector<int64_t>{7, 8, 7, 8, 7, 8, 7, 8}));
    EXPECT_EQ(want[0][4], (std::vector<int64_t>{5, 5, 5, 5}));  // scale * 10
    EXPECT_EQ(all_batches(rows), want);
    for (size_t stop : {0, 1, 3, 6}) {
      auto it = make().make_iterator();
      for (size_t i = 0; i < stop; ++i) ASSERT_TRUE(it.next());
      auto resumed = make().make_iterator();
      resumed.restore_state(it.save_state());
      EXPECT_EQ(all_batches(resumed), std::vector(want.begin() + static_cast<long>(stop), want.end()))
          << "stop " << stop;
    }
  }
}

TEST_F(TFRecordDatasetTest, BadRecordsOnTheRowPathNameTheRecord) {
  // Record 1 of file 0 has 5 pixel bytes for a [2, 2] image; batch asks for it as a row.
  std::vector<std::string> files = {(dir_ / "a").string(), (dir_ / "b").string()};
  for (size_t f = 0; f < 2; ++f) {
    TFRecordWriter w(files[f]);
    for (int i = 0; i < 2; ++i)
      w.write(Example().set_int64s("id", {i}).set_bytes("pix", std::string(f == 0 && i == 1 ? 5 : 4, 'x')).serialize());
    w.close();
  }
  for (int64_t reads : {1, 2}) {
    const auto ds = make_example_dataset(files, spec(), {.num_parallel_reads = reads});
    const std::string want = test::message_of<InvalidArgument>([&] { ids(ds); });
    const std::string got = test::message_of<InvalidArgument>([&] {
      auto it = ds.batch(3).make_iterator();
      while (it.next()) {
      }
    });
    EXPECT_EQ(got.substr(0, got.find(" [src/")), want.substr(0, want.find(" [src/")));  // the same but for lines
    EXPECT_NE(got.find("feature 'pix' in record 1 (byte offset"), std::string::npos) << got;
    EXPECT_NE(got.find(files[0]), std::string::npos) << got;
  }
}

TEST_F(TFRecordDatasetTest, ExposesFilesForSharding) {
  const auto files = write_files({1, 1, 1});
  auto ds = make_example_dataset(files, spec());
  ASSERT_TRUE(ds.node()->files());
  EXPECT_EQ(*ds.node()->files(), files);
  auto one = Dataset::from_node(ds.node()->with_files({files[2]}));
  EXPECT_EQ(ids(one), (std::vector<int64_t>{2000}));
}

TEST(FeatureSpecTest, FromNames) {
  const FeatureSpec s = make_feature_spec("bytes", {28, 28, 1}, "uint8");
  EXPECT_EQ(s.decode_raw, DType::kUInt8);
  EXPECT_EQ(make_feature_spec("float", {2}).type, FeatureType::kFloat);
  EXPECT_EQ(make_feature_spec("int64", {}, "", true).kind, FeatureSpec::Kind::kVarLen);
  EXPECT_THROW(make_feature_spec("int64", {}, "uint8"), InvalidArgument);
  EXPECT_THROW(make_feature_spec("double"), InvalidArgument);
  EXPECT_EQ(fashion_mnist_example_spec().at("image").shape, (Shape{28, 28, 1}));
}

}  // namespace
}  // namespace strata::data
