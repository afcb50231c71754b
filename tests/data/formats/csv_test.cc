// CsvDataset / CsvReader: types and defaults, header, quoted fields (delimiters, newlines, doubled
// quotes), select/exclude columns, na_value, errors naming the file, line and column, and resume.
#include "strata/data/csv.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/compression/byte_streams.h"
#include "test_util.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;
using test::message_of;

class CsvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / ("strata_csv_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                     "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  fs::path dir_;
};

std::vector<Element> all(const Dataset& ds) {
  std::vector<Element> out;
  auto it = ds.make_iterator();
  while (auto e = it.next()) out.push_back(*e);
  return out;
}

TEST_F(CsvTest, TypesDefaultsAndHeader) {
  const std::string p = write("a.csv",
                              "x,n,big,name\n"
                              "1.5, 7 ,123456789012,alpha\n"
                              "-2e3,,-1,\r\n"
                              "\n"  // empty lines are skipped
                              ",3,0,\"gamma, delta\"\n");
  auto ds = CsvDataset({p},
                       {CsvColumn::with_default(0.25f), CsvColumn::with_default(int32_t{-9}),
                        CsvColumn::required(CsvType::kInt64), CsvColumn::with_default(std::string("none"))},
                       {.header = true, .column_names = {"x", "n", "big", "name"}});
  const auto rows = all(ds);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["x"].item<float>(), 1.5f);
  EXPECT_EQ(rows[0]["x"].shape(), Shape{});
  EXPECT_EQ(rows[0]["n"].dtype(), DType::kInt32);
  EXPECT_EQ(rows[0]["n"].item<int32_t>(), 7);
  EXPECT_EQ(rows[0]["big"].item<int64_t>(), 123456789012);
  EXPECT_EQ(tensor_string(rows[0]["name"]), "alpha");
  EXPECT_EQ(rows[1]["x"].item<float>(), -2000.0f);
  EXPECT_EQ(rows[1]["n"].item<int32_t>(), -9);
  EXPECT_EQ(tensor_string(rows[1]["name"]), "none");
  EXPECT_EQ(rows[2]["x"].item<float>(), 0.25f);
  EXPECT_EQ(tensor_string(rows[2]["name"]), "gamma, delta");
}

TEST_F(CsvTest, QuotedFieldsHoldDelimitersNewlinesAndQuotes) {
  const std::string p = write("q.csv", "\"a\"\"b\",\"line1\nline2\",3\nplain,\"\",4");  // no final newline
  CsvReader reader(p, {CsvColumn::required(CsvType::kString), CsvColumn::with_default(std::string("empty")),
                       CsvColumn::required(CsvType::kInt64)});
  std::vector<Tensor> row;
  ASSERT_TRUE(reader.next(&row));
  EXPECT_EQ(tensor_string(row[0]), "a\"b");
  EXPECT_EQ(tensor_string(row[1]), "line1\nline2");
  EXPECT_EQ(row[2].item<int64_t>(), 3);
  ASSERT_TRUE(reader.next(&row));
  EXPECT_EQ(tensor_string(row[0]), "plain");
  EXPECT_EQ(tensor_string(row[1]), "empty");
  EXPECT_EQ(reader.line(), 3);
  EXPECT_FALSE(reader.next(&row));

  // Without quote handling, quotes are ordinary characters.
  const std::string p2 = write("q2.csv", "\"a\";b\n");
  CsvReader raw(p2, {CsvColumn::required(CsvType::kString), CsvColumn::required(CsvType::kString)},
                {.field_delim = ';', .use_quote_delim = false});
  ASSERT_TRUE(raw.next(&row));
  EXPECT_EQ(tensor_string(row[0]), "\"a\"");
  EXPECT_EQ(tensor_string(row[1]), "b");
}

TEST_F(CsvTest, SelectExcludeAndNaValue) {
  const std::string p = write("s.csv", "1,2,3,4\n5,NA,7,8\n");
  auto rows = all(CsvDataset({p}, {CsvColumn::required(CsvType::kInt32), CsvColumn::with_default(int32_t{0})},
                             {.na_value = "NA", .select_cols = {0, 1}}));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1][1].item<int32_t>(), 0);
  rows = all(CsvDataset({p}, {CsvColumn::required(CsvType::kInt32), CsvColumn::required(CsvType::kInt32)},
                        {.exclude_cols = {0, 1}}));
  EXPECT_EQ(rows[1][0].item<int32_t>(), 7);
  EXPECT_EQ(rows[1][1].item<int32_t>(), 8);
  EXPECT_THROW(all(CsvDataset({p}, {CsvColumn::required(CsvType::kInt32)}, {.select_cols = {0, 1}})), InvalidArgument);
}

TEST_F(CsvTest, ErrorsNameFileLineAndColumn) {
  const std::string p = write("bad.csv", "1,2\n3,x\n4\n,5\n");
  const std::vector<CsvColumn> cols = {CsvColumn::required(CsvType::kInt64), CsvColumn::required(CsvType::kFloat32)};
  CsvReader reader(p, cols);
  std::vector<Tensor> row;
  ASSERT_TRUE(reader.next(&row));
  std::string msg = message_of<InvalidArgument>([&] { reader.next(&row); });
  EXPECT_NE(msg.find("column 1 of the record at line 2 of " + p), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a valid float32: 'x'"), std::string::npos) << msg;
  msg = message_of<InvalidArgument>([&] { reader.next(&row); });
  EXPECT_NE(msg.find("expected 2 fields but the record at line 3"), std::string::npos) << msg;
  msg = message_of<InvalidArgument>([&] { reader.next(&row); });
  EXPECT_NE(msg.find("column 0 of the record at line 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("required"), std::string::npos) << msg;

  const std::string q = write("quote.csv", "\"abc\"d,1\n");
  CsvReader bad_quote(q, cols);
  EXPECT_THROW(bad_quote.next(&row), DataCorrupt);
  const std::string u = write("open.csv", "\"abc,1\n");
  CsvReader open_quote(u, cols);
  msg = message_of<DataCorrupt>([&] { open_quote.next(&row); });
  EXPECT_NE(msg.find("unterminated"), std::string::npos) << msg;
  const std::string o = write("overflow.csv", "1,2\n");
  CsvReader overflow(o, {CsvColumn::required(CsvType::kInt32), CsvColumn::with_default(int64_t{0})});
  ASSERT_TRUE(overflow.next(&row));
  const std::string big = write("big.csv", "99999999999,1\n");
  CsvReader too_big(big, {CsvColumn::required(CsvType::kInt32), CsvColumn::required(CsvType::kInt32)});
  EXPECT_THROW(too_big.next(&row), InvalidArgument);
  EXPECT_THROW(CsvReader(o, {CsvColumn{CsvType::kInt32, Tensor::scalar(1.0f)}}), InvalidArgument);
}

TEST_F(CsvTest, ResumesAcrossFilesAndCompression) {
  std::string text = "id\n";
  for (int i = 0; i < 6; ++i) text += std::to_string(i) + "\n";
  const std::string a = write("a.csv", text);
  const std::string b = (dir_ / "b.csv.gz").string();
  {
    detail::ByteWriter gz(b, Compression::kGzip);
    const std::string gz_text = "id\n10\n11\n";
    gz.write(gz_text.data(), gz_text.size());
    gz.close();
  }
  const auto make = [&](Compression c, std::vector<std::string> files) {
    return CsvDataset(files, {CsvColumn::required(CsvType::kInt64)}, {.header = true, .compression = c});
  };
  const auto values = [](const Dataset& ds) {
    std::vector<int64_t> v;
    for (const auto& e : all(ds)) v.push_back(e[0].item<int64_t>());
    return v;
  };
  EXPECT_EQ(values(make(Compression::kGzip, {b})), (std::vector<int64_t>{10, 11}));
  const std::vector<int64_t> full = values(make(Compression::kNone, {a, a}));
  ASSERT_EQ(full.size(), 12u);
  for (size_t stop = 0; stop <= full.size(); ++stop) {
    auto it = make(Compression::kNone, {a, a}).make_iterator();
    for (size_t i = 0; i < stop; ++i) ASSERT_TRUE(it.next());
    auto resumed = make(Compression::kNone, {a, a}).make_iterator();
    resumed.restore_state(it.save_state());
    std::vector<int64_t> rest;
    while (auto e = resumed.next()) rest.push_back((*e)[0].item<int64_t>());
    EXPECT_EQ(rest, std::vector<int64_t>(full.begin() + static_cast<long>(stop), full.end()));
  }
}

}  // namespace
}  // namespace strata::data
