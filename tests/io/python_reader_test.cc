// An independent reader agrees with the writer: tests/io/read_safetensors.py (json + numpy only, run
// with /usr/bin/python3) reads files save_safetensors wrote and prints what the C++ side holds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/io_test_util.h"
#include "strata/io/safetensors.h"
#include "test_util.h"

namespace strata::io {
namespace {

using strata::test::ScratchDir;

std::string script_path() {
  const auto beside = std::filesystem::path(__FILE__).parent_path() / "read_safetensors.py";
  if (std::filesystem::exists(beside)) return beside.string();
  return "tests/io/read_safetensors.py";  // ctest runs from the source root
}

struct Result {
  int status = -1;
  std::string out;
};

Result run_command(const std::string& command) {
  Result r;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class PythonReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Result probe = run_command("/usr/bin/python3 -c 'import numpy' 2>&1");
    ASSERT_EQ(probe.status, 0) << "these tests need /usr/bin/python3 with numpy (apt-get install python3-numpy; "
                                  "scripts/setup.sh installs it): "
                               << probe.out;
  }
  // The script's stdout (and its stderr too when `with_stderr`) and exit status.
  Result read(const std::string& file, const std::string& flags = "", bool with_stderr = false) {
    return run_command("/usr/bin/python3 " + script_path() + " '" + file + "' " + flags + (with_stderr ? " 2>&1" : ""));
  }
};

std::vector<std::vector<std::string>> lines_of(const std::string& out) {
  std::vector<std::vector<std::string>> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string w; fields >> w;) f.push_back(w);
    lines.push_back(f);
  }
  return lines;
}

std::string shape_compact(const Shape& s) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < s.size(); ++i) out << (i ? "," : "") << s[i];
  out << ']';
  return out.str();
}

// Every element as double (bfloat16 widened), in row-major order.
std::vector<double> values_of(const Tensor& t) {
  if (t.dtype() == DType::kBFloat16) return t.to(DType::kFloat32).to_vector<double>();
  return t.to_vector<double>();
}

TEST_F(PythonReaderTest, PrintsTheNamesDtypesShapesAndValuesTheWriterSaved) {
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  Tensor big_i64 = Tensor::from_vector<int64_t>({(int64_t{1} << 40) + 3, -7, 123456789012345}, {3});
  const NamedTensors tensors = {
      {"dense/kernel", test::random_tensor({16, 8}, 3)},
      {"dense/bias", test::random_tensor({8}, 4, -100.0f, 100.0f)},
      {"conv2d/kernel", test::random_tensor({3, 3, 1, 4}, 5)},
      {"optimizer/iterations", Tensor::from_vector<int64_t>({1234}, {})},
      {"labels", Tensor::from_vector<int32_t>({-3, 0, 9, 2147483647}, {2, 2})},
      {"pixels", Tensor::from_vector<uint8_t>({0, 17, 255}, {3})},
      {"big", big_i64},
      {"mixed", test::random_tensor({5}, 6).to(DType::kBFloat16)},
      {"scalar", Tensor::scalar(2.5f)},
      {"nothing", Tensor::empty({0, 4})},
  };
  save_safetensors(path, tensors, {{"step", "12"}, {"format", "strata"}});
  const Result r = read(path, "--values --metadata");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), tensors.size() + 1) << r.out;
  // The caller's metadata and a checksum per tensor, which the script verified with its own CRC-32C.
  ASSERT_EQ(lines[0].size(), 2u);
  EXPECT_EQ(lines[0][0], "__metadata__");
  nlohmann::json expected_meta = {{"format", "strata"}, {"step", "12"}};
  const auto meta = nlohmann::json::parse(lines[0][1]);
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(meta.contains("crc32c:" + name)) << name;
    expected_meta["crc32c:" + name] = meta["crc32c:" + name];
  }
  EXPECT_EQ(meta, expected_meta);
  EXPECT_EQ(meta["crc32c:nothing"], "00000000");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    const auto& f = lines[i + 1];
    SCOPED_TRACE(name);
    ASSERT_EQ(f.size(), 4 + static_cast<size_t>(t.numel()));
    EXPECT_EQ(f[0], name);
    EXPECT_EQ(f[1], safetensors_dtype_code(t.dtype()));
    EXPECT_EQ(f[2], shape_compact(t.shape()));
    const std::vector<double> v = values_of(t);
    double sum = 0;
    for (double x : v) sum += x;
    const bool is_int = t.dtype() == DType::kInt32 || t.dtype() == DType::kInt64 || t.dtype() == DType::kUInt8;
    if (is_int) {
      long long s = 0;
      for (long long x : t.to_vector<int64_t>()) s += x;
      EXPECT_EQ(f[3], std::to_string(s));
    } else {
      EXPECT_NEAR(std::stod(f[3]), sum, 1e-12 * (1 + std::abs(sum)));
    }
    for (size_t k = 0; k < v.size(); ++k) {
      if (is_int) {
        EXPECT_EQ(std::stoll(f[4 + k]), t.to_vector<int64_t>()[k]) << "element " << k;
      } else {
        EXPECT_EQ(std::stof(f[4 + k]), static_cast<float>(v[k])) << "element " << k;  // %.9g round-trips float32
      }
    }
  }
}

TEST_F(PythonReaderTest, DefaultOutputIsNameDtypeShapeSum) {
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  save_safetensors(path, {{"a", Tensor::from_vector<float>({0.5f, 0.25f, 2.0f}, {3, 1})},
                          {"n", Tensor::from_vector<int64_t>({4, 5}, {2})}});
  const Result r = read(path);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "a F32 [3,1] 2.75\nn I64 [2] 9\n");
}

TEST_F(PythonReaderTest, RejectsAFileWithBytesNoTensorOwns) {
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  save_safetensors(path, {{"a", Tensor::ones({4})}});
  test::write_bytes(path, test::read_bytes(path) + "junk");
  EXPECT_THROW(load_safetensors(path), DataCorrupt);
  const Result r = read(path, "--values", /*with_stderr=*/true);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, ::testing::HasSubstr("4 bytes after the last tensor"));
}

TEST_F(PythonReaderTest, RejectsATensorWhoseBytesDoNotMatchItsChecksum) {
  // The script's CRC-32C is its own: it agrees with the writer's on good files (above) and catches a flip.
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  save_safetensors(path, {{"a", Tensor::ones({4})}, {"b", Tensor::from_vector<int32_t>({7, 8}, {2})}});
  std::string bytes = test::read_bytes(path);
  bytes[bytes.size() - 8 - 1] ^= 0x01;  // the last byte of "a" ("b" holds the last 8)
  test::write_bytes(path, bytes);
  EXPECT_THROW(load_safetensors(path), DataCorrupt);
  const Result r = read(path, "", /*with_stderr=*/true);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, ::testing::HasSubstr("tensor 'a' is damaged"));
}

}  // namespace
}  // namespace strata::io
