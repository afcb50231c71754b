// `strata data ctr` end to end (the synthetic click-through-rate data set: flags, files, errors), and `strata train`
// learning it from a job whose x is an int64 list of ids fed to an Embedding (data.x_dtype: int64), the shape of
// configs/ctr_embedding.yaml with a tiny vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>

#include "cli/cli_test_util.h"
#include "cli/job.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::cli {
namespace {

std::string strata_bin() { return std::string(STRATA_BINARY); }

// The click rate (0..1) `strata data ctr` printed for `split`.
double click_rate(const std::string& log, const std::string& split) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(log, m, std::regex("wrote [0-9]+ " + split + " records .*clicks ([0-9.]+)%"))) << log;
  return m.empty() ? 0 : std::stod(m[1]) / 100;
}

std::string ctr_job(const fs::path& data, const std::string& extra_data = "") {
  return "data:\n  format: tfrecord\n  train: [" + (data / "train-*").string() + "]\n  test: [" +
         (data / "test-*").string() + "]\n  x: ids\n  x_dtype: int64\n  x_shape: [6]\n  y: label\n  shuffle: 4000\n" +
         extra_data +
         "model:\n  - embedding: {input_dim: 300, output_dim: 8}\n  - flatten\n  - dense: {units: 16, activation: "
         "relu}\n  - dense: {units: 1, activation: sigmoid}\nloss: binary_crossentropy\n"
         "optimizer: {name: adam, learning_rate: 0.01}\nmetrics: [accuracy]\nepochs: 4\nbatch_size: 64\nseed: 1\n";
}

TEST(CtrCommandTest, WritesShardsThatAJobWithAnEmbeddingLearns) {
  Scratch s("ctr");
  const fs::path data = s.dir / "ctr";
  const auto [rc, log] = run(strata_bin() + " data ctr --output " + data.string() +
                             " --examples 4000 --test-examples 1000 --shards 2 --features 6 --vocab 300 --seed 1");
  ASSERT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("wrote 4000 train records (6 ids each in [0, 300)"), std::string::npos) << log;
  EXPECT_NE(log.find("wrote 1000 test records"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(data / "train-00001-of-00002.tfrecord"));
  EXPECT_TRUE(fs::exists(data / "test-00000-of-00002.tfrecord"));
  const double test_clicks = click_rate(log, "test");

  // The same seed writes the same bytes.
  const auto [rc_again, log_again] =
      run(strata_bin() + " data ctr --output " + (s.dir / "again").string() +
          " --examples 4000 --test-examples 1000 --shards 2 --features 6 --vocab 300 --seed 1");
  ASSERT_EQ(rc_again, 0) << log_again;
  EXPECT_EQ(run("cmp " + (data / "train-00001-of-00002.tfrecord").string() + " " +
                (s.dir / "again" / "train-00001-of-00002.tfrecord").string())
                .first,
            0);

  const std::string job = write_job(s.dir, ctr_job(data));
  const auto [train_rc, out] = run(strata_bin() + " train " + job + " --threads 1");
  ASSERT_EQ(train_rc, 0) << out;
  EXPECT_NE(out.find("Embedding"), std::string::npos) << out;
  std::smatch m;
  const std::string trained = last_line(out);
  ASSERT_TRUE(std::regex_match(trained, m, std::regex(R"(test loss ([0-9.]+) - test accuracy ([0-9.]+))"))) << out;
  const double accuracy = std::stod(m[2]), base = std::max(test_clicks, 1 - test_clicks);
  std::cout << "test accuracy " << accuracy << " against a base rate of " << base << "\n";
  EXPECT_GT(accuracy, base + 0.08) << out;
}

TEST(CtrCommandTest, BadFlagsAreClearErrors) {
  Scratch s("ctr_flags");
  const std::string out = " data ctr --output " + (s.dir / "x").string();
  const std::pair<std::string, std::string> cases[] = {
      {" --zipf 0", "--zipf must be a finite number > 0, got 0"},
      {" --zipf nan", "--zipf must be a finite number > 0"},
      {" --vocab 0", "--vocab must be >= 1, got 0"},
      {" --features 0", "--features must be >= 1, got 0"},
      {" --examples 0", "--examples must be >= 1, got 0"},
      {" --examples 5 --shards 6", "--shards must be in [1, --examples = 5], got 6"},
      {" --test-examples 0", "--test-examples must be >= 1, got 0"},
      {" --compression zlib", "--compression must be none or gzip, got 'zlib'"},
  };
  for (const auto& [flags, message] : cases) {
    const auto [rc, log] = run(strata_bin() + out + flags);
    EXPECT_NE(rc, 0) << flags;
    EXPECT_NE(log.find(message), std::string::npos) << flags << "\n" << log;
  }
  EXPECT_FALSE(fs::exists(s.dir / "x" / "train-00000-of-00001.tfrecord"));
  const auto [rc, log] = run(strata_bin() + " data ctr --examples 10");
  EXPECT_NE(rc, 0);
  EXPECT_NE(log.find("--output"), std::string::npos) << log;
}

TEST(CtrCommandTest, TheIdsOfAJobAreChecked) {
  Scratch s("ctr_job");
  const auto message = [&](const std::string& body) {
    const std::string job = write_job(s.dir, body);
    return test::message_of<InvalidArgument>([&] { load_job(job); });
  };
  std::string body = ctr_job(s.dir);
  EXPECT_NO_THROW(load_job(write_job(s.dir, body)));
  EXPECT_NE(message(std::regex_replace(body, std::regex("x_dtype: int64"), "x_dtype: float16"))
                .find("data.x_dtype: expected uint8 (raw image bytes) or int64"),
            std::string::npos);
  EXPECT_NE(message(ctr_job(s.dir, "  scale: 0.5\n")).find("data.scale: scales uint8 pixels; x_dtype int64"),
            std::string::npos);
  EXPECT_NE(message(std::regex_replace(body, std::regex("  x_shape: \\[6\\]\n"), "")).find("needs the shape of x"),
            std::string::npos);
  EXPECT_NE(message(ctr_job(s.dir, "  image_shape: [6]\n")).find("give image_shape or x_shape, not both"),
            std::string::npos);
  const Job job = load_job(write_job(s.dir, body));
  EXPECT_EQ(job.data.x_dtype, "int64");
  EXPECT_EQ(input_shape(job), (Shape{64, 6}));
}

}  // namespace
}  // namespace strata::cli
