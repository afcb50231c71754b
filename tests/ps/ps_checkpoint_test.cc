// A parameter server's checkpoints (src/ps/ps_checkpoint.h): numbered directories under the directory the ps was
// started with, never a path a caller names; each published whole; the litter of uncommitted saves and dead writers
// removed by the next save; and the chief's manifest, which alone makes a checkpoint count.
#include "ps/ps_checkpoint.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "io/io_test_util.h"
#include "strata/error.h"
#include "strata/ps/server.h"
#include "test_util.h"

namespace strata::ps {
namespace {

namespace fs = std::filesystem;

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// The pid of a process that has exited (and been reaped): a writer that died.
pid_t a_dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

TEST(PsCheckpointTest, SavesAreNumberedUnderTheServersOwnDirectoryAndTheNextSaveRemovesTheLitter) {
  test::ScratchDir scratch;
  const fs::path dir = scratch / "ps-0";
  ParameterServer server;
  server.start("127.0.0.1:0", {.checkpoint_directory = dir.string()});
  ParameterServerClient client("127.0.0.1:" + std::to_string(server.port()));
  client.create("w", Tensor::full({3}, 1.0), {.name = "sgd", .learning_rate = 1.0});

  EXPECT_EQ(client.save(1), 1);
  EXPECT_EQ(entries(dir), (std::set<std::string>{"ckpt-1"}));
  EXPECT_EQ(entries(dir / "ckpt-1"), (std::set<std::string>{"w.safetensors"}));
  client.push("w", Tensor::full({3}, 1.0), "step:1");  // w = 0
  EXPECT_EQ(client.save(2, /*keep=*/1), 1);
  EXPECT_EQ(entries(dir), (std::set<std::string>{"ckpt-1", "ckpt-2"}));

  // Litter: a checkpoint no manifest names, a dead writer's temporary; and a file that is not the ps's.
  fs::create_directories(dir / "ckpt-7");
  fs::create_directories(dir / ("ckpt-3.tmp-" + std::to_string(a_dead_pid()) + "-0"));
  std::ofstream(dir / "notes.txt") << "mine";
  EXPECT_EQ(client.save(3, /*keep=*/2), 1);
  EXPECT_EQ(entries(dir), (std::set<std::string>{"ckpt-2", "ckpt-3", "notes.txt"}));

  // A ps restarted on checkpoint 2 starts with its values, fenced: it holds an older state than the job acknowledged,
  // so it serves no pull, push or save until it is rolled back to that very checkpoint.
  ParameterServer restarted;
  restarted.start("127.0.0.1:0", {.checkpoint_directory = dir.string(), .restore_checkpoint = 2});
  EXPECT_EQ(restarted.shards_restored(), 1);
  ParameterServerClient again("127.0.0.1:" + std::to_string(restarted.port()));
  const ParameterServerClient::Stats fenced = again.stats();
  EXPECT_EQ(fenced.fenced_at, 2);
  ASSERT_EQ(fenced.shard_status.size(), 1u);
  EXPECT_EQ(fenced.shard_status[0].name, "w");
  for (const auto& refused : std::vector<std::function<void()>>{
           [&] { again.pull("w"); }, [&] { again.push("w", Tensor::ones({3}), "step:9"); }, [&] { again.save(4); }}) {
    test::expect_error_containing<Error>(refused, {"restarted from checkpoint 2", "rolls the job back"});
  }
  EXPECT_EQ(again.restore(2), 1);  // lifts the fence only
  EXPECT_EQ(again.stats().fenced_at, 0);
  EXPECT_EQ(again.pull("w").to_vector<float>(), std::vector<float>(3, 0.0f));
}

TEST(PsCheckpointTest, ACallNamesACheckpointNumberThatThePsHas) {
  test::ScratchDir scratch;
  ParameterServer without;
  without.start("127.0.0.1:0");
  ParameterServerClient client("127.0.0.1:" + std::to_string(without.port()));
  test::expect_error_containing<InvalidArgument>([&] { client.save(1); },
                                                 {"Save", "started without a checkpoint directory"});
  test::expect_error_containing<InvalidArgument>([&] { client.restore(1); },
                                                 {"Restore", "started without a checkpoint directory"});

  ParameterServer with;
  with.start("127.0.0.1:0", {.checkpoint_directory = scratch / "ps-1"});
  ParameterServerClient job("127.0.0.1:" + std::to_string(with.port()));
  test::expect_error_containing<InvalidArgument>([&] { job.save(0); }, {"checkpoint numbers start at 1, got 0"});
  test::expect_error_containing<InvalidArgument>([&] { job.restore(4); }, {"this ps has no", "ckpt-4"});
  // A restore that names a missing checkpoint fails the start, before the ps serves anything.
  ParameterServer restarted;
  test::expect_error_containing<InvalidArgument>(
      [&] {
        restarted.start("127.0.0.1:0", {.checkpoint_directory = scratch / "ps-1", .restore_checkpoint = 4});
      },
      {"ps: Restore: this ps has no", "ckpt-4"});
}

TEST(PsCheckpointTest, TheManifestIsAbsentUntilCommittedAndThenReadBack) {
  test::ScratchDir scratch;
  EXPECT_FALSE(detail::read_ps_manifest(scratch.path()).has_value());
  detail::commit_ps_manifest(scratch.path(), {.checkpoint = 3, .step = 938, .ps_shards = {4, 3}});
  const auto manifest = detail::read_ps_manifest(scratch.path());
  ASSERT_TRUE(manifest.has_value());
  EXPECT_EQ(manifest->checkpoint, 3);
  EXPECT_EQ(manifest->step, 938);
  EXPECT_EQ(manifest->ps_shards, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(entries(scratch.path()), (std::set<std::string>{"ps_checkpoint.json"}));  // no temporary left

  std::ofstream(scratch / "ps_checkpoint.json") << "{\"checkpoint\": \"x\"}";
  test::expect_error_containing<DataCorrupt>([&] { detail::read_ps_manifest(scratch.path()); },
                                             {"ps_checkpoint.json", "is not a parameter-server checkpoint manifest"});
}

}  // namespace
}  // namespace strata::ps
