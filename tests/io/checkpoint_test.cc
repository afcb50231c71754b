// CheckpointManager: round trips of everything a training checkpoint holds, the manifest, latest(),
// max_to_keep, replacing a number, failures that leave the previous checkpoints as they were, damage
// (a missing manifest, flipped bits) reported instead of skipped, and removal of dead writers' litter.
#include "strata/io/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include <algorithm>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/io_test_util.h"
#include "test_util.h"

namespace strata::io {
namespace {

namespace fs = std::filesystem;
using strata::test::message_of;
using strata::test::read_bytes;
using strata::test::ScratchDir;
using strata::test::write_bytes;
using testing::ElementsAre;
using testing::HasSubstr;

TrainingCheckpoint make_checkpoint(float scale, int64_t step) {
  TrainingCheckpoint c;
  c.weights = {{"dense/kernel", test::random_tensor({4, 3}, 1, -scale, scale)},
               {"dense/bias", Tensor::full({3}, scale)},
               {"batch_normalization/moving_mean", Tensor::zeros({3})}};
  c.optimizer = {{"dense/kernel/m", test::random_tensor({4, 3}, 2)},
                 {"dense/kernel/v", test::random_tensor({4, 3}, 3, 0.0f, 1.0f)},
                 {"iterations", Tensor::from_vector<int64_t>({step}, {})}};
  c.step = step;
  c.epoch = step / 10;
  c.rng = {0xFFFFFFFFFFFFFFFFull, 7, (uint64_t{1} << 53) + 1};
  c.extra_json = R"({"iterator": {"epoch": 2, "position": 640}, "note": "x"})";
  return c;
}

void expect_same(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].first);
    EXPECT_EQ(a[i].first, b[i].first);
    ASSERT_EQ(a[i].second.shape(), b[i].second.shape());
    ASSERT_EQ(a[i].second.dtype(), b[i].second.dtype());
    EXPECT_EQ(std::memcmp(a[i].second.raw_data(), b[i].second.raw_data(), a[i].second.nbytes()), 0);
  }
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_bytes(path)); }

TEST(CheckpointTest, SaveAndRestoreRoundTripEverything) {
  ScratchDir dir;
  CheckpointManager manager(dir / "ckpts");
  EXPECT_EQ(manager.latest(), std::nullopt);  // the directory does not exist yet
  const TrainingCheckpoint c = make_checkpoint(0.5f, 120);
  const std::string path = manager.save(c, 3);
  EXPECT_EQ(path, dir / "ckpts/ckpt-3");
  EXPECT_EQ(manager.latest(), path);
  const TrainingCheckpoint r = CheckpointManager::restore(path);
  expect_same(r.weights, c.weights);
  expect_same(r.optimizer, c.optimizer);
  EXPECT_EQ(r.step, 120);
  EXPECT_EQ(r.epoch, 12);
  EXPECT_EQ(r.rng, c.rng);
  EXPECT_EQ(nlohmann::json::parse(r.extra_json), nlohmann::json::parse(c.extra_json));
  // The restored state resumes the generator exactly where it was.
  Generator a(c.rng), b(r.rng);
  EXPECT_EQ(a.next_block(), b.next_block());
}

TEST(CheckpointTest, LayoutAndManifestDescribeTheCheckpoint) {
  ScratchDir dir;
  CheckpointManager manager(dir.path());
  const TrainingCheckpoint c = make_checkpoint(1.0f, 7);
  const std::string path = manager.save(c, 1);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"checkpoint", "ckpt-1"}));  // no temporaries left
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(path)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_THAT(files, ElementsAre("manifest.json", "model.safetensors", "optimizer.safetensors"));

  const auto m = read_json(path + "/manifest.json");
  EXPECT_EQ(m["format"], "strata-checkpoint");
  EXPECT_EQ(m["version"], kCheckpointFormatVersion);
  EXPECT_EQ(m["step"], 7);
  EXPECT_EQ(m["epoch"], 0);
  EXPECT_EQ(m["rng"]["seed"].get<uint64_t>(), 0xFFFFFFFFFFFFFFFFull);
  EXPECT_EQ(m["rng"]["offset"].get<uint64_t>(), (uint64_t{1} << 53) + 1);
  EXPECT_EQ(m["files"]["model"], "model.safetensors");
  EXPECT_EQ(m["files"]["optimizer"], "optimizer.safetensors");
  EXPECT_THAT(m["created"].get<std::string>(), testing::MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T.*Z"));
  ASSERT_EQ(m["model"].size(), 3u);
  EXPECT_EQ(m["model"][0], nlohmann::json({{"name", "dense/kernel"}, {"dtype", "F32"}, {"shape", {4, 3}}}));
  EXPECT_EQ(m["optimizer"][2],
            nlohmann::json({{"name", "iterations"}, {"dtype", "I64"}, {"shape", nlohmann::json::array()}}));
  EXPECT_EQ(m["extra"]["iterator"]["position"], 640);

  // The weights file is plain safetensors with the variables' names and some metadata.
  std::map<std::string, std::string> meta;
  const NamedTensors w = load_safetensors(path + "/model.safetensors", &meta);
  EXPECT_EQ(w[1].first, "dense/bias");
  EXPECT_EQ(meta["step"], "7");

  const auto pointer = read_json(dir / "checkpoint");
  EXPECT_EQ(pointer["latest"], "ckpt-1");
  EXPECT_EQ(pointer["all"], nlohmann::json::array({"ckpt-1"}));
}

TEST(CheckpointTest, InputStateIsWrittenOnlyWhenThereIsOne) {
  ScratchDir dir;
  CheckpointManager manager(dir.path());
  // Without input state: no input.safetensors, no "input" in the manifest, and an empty `input` back.
  const std::string plain = manager.save(make_checkpoint(1.0f, 1), 1);
  EXPECT_FALSE(fs::exists(plain + "/input.safetensors"));
  auto m = read_json(plain + "/manifest.json");
  EXPECT_FALSE(m["files"].contains("input"));
  EXPECT_FALSE(m.contains("input"));
  EXPECT_TRUE(CheckpointManager::restore(plain).input.empty());

  TrainingCheckpoint c = make_checkpoint(1.0f, 2);
  c.input = {{"shuffle/buffer", Tensor::from_vector<uint8_t>({1, 2, 3, 250}, {4})},
             {"batch/position", Tensor::from_vector<uint8_t>({9}, {1})}};
  const std::string path = manager.save(c, 2);
  m = read_json(path + "/manifest.json");
  EXPECT_EQ(m["files"]["input"], "input.safetensors");
  EXPECT_EQ(m["input"][0], nlohmann::json({{"name", "shuffle/buffer"}, {"dtype", "U8"}, {"shape", {4}}}));
  const TrainingCheckpoint r = CheckpointManager::restore(path);
  expect_same(r.input, c.input);
  expect_same(r.weights, c.weights);

  // The input file is checked against the manifest like the others.
  auto changed = m;
  changed["input"][1]["shape"] = {2};
  write_bytes(path + "/manifest.json", changed.dump());
  std::string msg = message_of<DataCorrupt>([&] { CheckpointManager::restore(path); });
  EXPECT_THAT(msg, HasSubstr("input.safetensors does not hold what"));
  EXPECT_THAT(msg, HasSubstr("tensor 'batch/position' has shape [1] but [2] was expected"));
  changed = m;
  changed.erase("input");
  write_bytes(path + "/manifest.json", changed.dump());
  EXPECT_THAT(message_of<DataCorrupt>([&] { CheckpointManager::restore(path); }),
              HasSubstr("lists file 'input.safetensors' but has no \"input\" tensors"));
  write_bytes(path + "/manifest.json", m.dump());
  fs::remove(path + "/input.safetensors");
  EXPECT_THAT(message_of<IoError>([&] { CheckpointManager::restore(path); }), HasSubstr("input.safetensors"));
}

// Seen while fuzzing (fuzz/checkpoint_fuzzer): a manifest whose "extra" nests 100000 arrays overflowed the stack
// when restore printed it back to a string; the files' nesting is capped before they are parsed.
TEST(CheckpointTest, AManifestNestedTooDeepIsDataCorrupt) {
  ScratchDir dir;
  CheckpointManager manager(dir / "ckpts");
  const std::string path = manager.save(make_checkpoint(0.5f, 1), 1);
  std::string manifest = read_bytes(path + "/manifest.json");
  const size_t extra = manifest.find("\"extra\": {");
  ASSERT_NE(extra, std::string::npos);
  manifest.insert(extra + 10, "\"deep\": " + std::string(100000, '[') + std::string(100000, ']') + ", ");
  write_bytes(path + "/manifest.json", manifest);
  const std::string msg = message_of<DataCorrupt>([&] { CheckpointManager::restore(path); });
  EXPECT_THAT(msg, HasSubstr("manifest.json nests arrays or objects deeper than 100 levels"));
  write_bytes(dir / "ckpts/checkpoint", std::string(100000, '{'));
  EXPECT_THAT(message_of<DataCorrupt>([&] { manager.latest(); }), HasSubstr("checkpoint nests arrays or objects"));
}

TEST(CheckpointTest, RestoreReportsDamagedTensorData) {
  ScratchDir dir;
  CheckpointManager manager(dir.path());
  TrainingCheckpoint c = make_checkpoint(1.0f, 1);
  c.input = {{"iterator", Tensor::from_vector<uint8_t>({1, 2, 3}, {3})}};
  const std::string path = manager.save(c, 1);
  // Flip one bit in the last byte of each file: the data of its last tensor.
  for (const auto& [file, tensor] :
       std::vector<std::pair<std::string, std::string>>{{"model.safetensors", "batch_normalization/moving_mean"},
                                                        {"optimizer.safetensors", "iterations"},
                                                        {"input.safetensors", "iterator"}}) {
    SCOPED_TRACE(file);
    const std::string original = read_bytes(path + "/" + file);
    std::string bytes = original;
    bytes.back() = static_cast<char>(bytes.back() ^ 0x04);
    write_bytes(path + "/" + file, bytes);
    const std::string msg = message_of<DataCorrupt>([&] { CheckpointManager::restore(path); });
    EXPECT_THAT(msg, HasSubstr(path + "/" + file + ": tensor '" + tensor + "' is damaged"));
    EXPECT_THAT(msg, testing::ContainsRegex("CRC-32C [0-9a-f]{8} but the file records [0-9a-f]{8}"));
    write_bytes(path + "/" + file, original);
  }
  EXPECT_EQ(CheckpointManager::restore(path).step, 1);
}

TEST(CheckpointTest, KeepsAtMostMaxToKeepDroppingTheOldestSaved) {
  ScratchDir dir;
  CheckpointManager manager(dir.path(), 2);
  for (int n = 1; n <= 5; ++n) manager.save(make_checkpoint(static_cast<float>(n), n), n);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"checkpoint", "ckpt-4", "ckpt-5"}));
  EXPECT_EQ(manager.checkpoints(), (std::vector<std::string>{dir / "ckpt-4", dir / "ckpt-5"}));
  EXPECT_EQ(manager.latest(), dir / "ckpt-5");
  EXPECT_EQ(CheckpointManager::restore(*manager.latest()).step, 5);
  // "Latest" is the last saved, not the highest number (a run restarted from an earlier checkpoint).
  manager.save(make_checkpoint(9.0f, 2), 2);
  EXPECT_EQ(manager.latest(), dir / "ckpt-2");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"checkpoint", "ckpt-2", "ckpt-5"}));
  // A new manager on the same directory (a restarted job) continues the same list.
  CheckpointManager again(dir.path(), 2);
  again.save(make_checkpoint(1.0f, 6), 6);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"checkpoint", "ckpt-2", "ckpt-6"}));
}

TEST(CheckpointTest, RemoveAllDeletesTheCheckpointsAndOnlyThem) {
  ScratchDir dir;
  const std::string backups = dir / "backups";
  CheckpointManager manager(backups, 3);
  for (int n = 1; n <= 2; ++n) manager.save(make_checkpoint(static_cast<float>(n), n), n);
  manager.remove_all();
  EXPECT_FALSE(std::filesystem::exists(backups));  // nothing else was in it: the directory goes too
  EXPECT_EQ(manager.latest(), std::nullopt);
  manager.remove_all();  // a missing directory: nothing to do
  // A file that is not the manager's stays, and with it the directory.
  manager.save(make_checkpoint(1.0f, 1), 1);
  std::ofstream(backups + "/notes.txt") << "mine";
  manager.remove_all();
  EXPECT_TRUE(std::filesystem::exists(backups + "/notes.txt"));
  EXPECT_EQ(manager.latest(), std::nullopt);
}

TEST(CheckpointTest, MaxToKeepBelowOneKeepsEverything) {
  ScratchDir dir;
  CheckpointManager manager(dir.path(), 0);
  for (int n = 0; n < 4; ++n) manager.save(make_checkpoint(1.0f, n), n);
  EXPECT_EQ(manager.checkpoints().size(), 4u);
}

TEST(CheckpointTest, SavingTheSameNumberReplacesIt) {
  ScratchDir dir;
  CheckpointManager manager(dir.path());
  manager.save(make_checkpoint(1.0f, 10), 1);
  TrainingCheckpoint second = make_checkpoint(2.0f, 20);
  second.weights.push_back({"new/var", Tensor::ones({2})});
  manager.save(second, 1);
  const TrainingCheckpoint r = CheckpointManager::restore(dir / "ckpt-1");
  EXPECT_EQ(r.step, 20);
  expect_same(r.weights, second.weights);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"checkpoint", "ckpt-1"}));
  EXPECT_EQ(read_json(dir / "checkpoint")["all"], nlohmann::json::array({"ckpt-1"}));
}

TEST(CheckpointTest, LatestFallsBackToTheHighestCompleteCheckpoint) {
  ScratchDir dir;
  CheckpointManager manager(dir.path());
  EXPECT_EQ(manager.latest(), std::nullopt);  // exists but empty
  manager.save(make_checkpoint(1.0f, 1), 1);
  manager.save(make_checkpoint(1.0f, 3), 3);
  fs::create_directory(dir / ".ckpt-12.tmp-1-0");  // a crashed save's temporary: not a checkpoint
  fs::remove(dir / "checkpoint");
  EXPECT_EQ(manager.latest(), dir / "ckpt-3");
  write_bytes(dir / "checkpoint", R"({"latest": "ckpt-8", "all": ["ckpt-8"]})");  // names one that is gone
  EXPECT_EQ(manager.latest(), dir / "ckpt-3");
}

TEST(CheckpointTest, LatestReportsADamagedCheckpointInsteadOfSkippingIt) {
  ScratchDir dir;
  CheckpointManager manager(dir.path());
  manager.save(make_checkpoint(1.0f, 1), 1);
  // The only checkpoint lost its manifest: resuming must not silently start over.
  fs::remove(dir / "ckpt-1/manifest.json");
  std::string msg = message_of<DataCorrupt>([&] { manager.latest(); });
  EXPECT_THAT(msg, HasSubstr("checkpoint " + (dir / "ckpt-1") + " is incomplete (it has no manifest.json) but " +
                             (dir / "checkpoint") + " names it as the latest"));
  // Without the pointer file it is the highest-numbered one, and damaged all the same.
  fs::remove(dir / "checkpoint");
  msg = message_of<DataCorrupt>([&] { manager.latest(); });
  EXPECT_THAT(msg, HasSubstr(dir / "ckpt-1"));
  EXPECT_THAT(msg, HasSubstr("is the highest-numbered checkpoint"));
  // save() does not write over it either.
  EXPECT_THAT(message_of<DataCorrupt>([&] { manager.save(make_checkpoint(1.0f, 1), 1); }),
              HasSubstr("will not write over it"));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt-1"});
  EXPECT_FALSE(fs::exists(dir / "ckpt-1/manifest.json"));
  // Moved away, nothing is left to resume from: that is "start at the beginning" again.
  fs::rename(dir / "ckpt-1", dir / "damaged");
  EXPECT_EQ(manager.latest(), std::nullopt);
}

TEST(CheckpointTest, LatestDoesNotFallBackPastADamagedNewestCheckpoint) {
  ScratchDir dir;
  CheckpointManager manager(dir.path(), 1);
  manager.save(make_checkpoint(1.0f, 1), 1);
  fs::create_directory(dir / "older");
  fs::copy(dir / "ckpt-1", dir / "older");
  manager.save(make_checkpoint(1.0f, 2), 2);
  fs::rename(dir / "older", dir / "ckpt-1");  // a complete older one, outside max_to_keep
  fs::remove(dir / "ckpt-2/manifest.json");
  EXPECT_THAT(message_of<DataCorrupt>([&] { manager.latest(); }), HasSubstr(dir / "ckpt-2"));
  // The pointer names the complete ckpt-1, but a higher-numbered ckpt-5 is incomplete: also damage.
  write_bytes(dir / "checkpoint", R"({"latest": "ckpt-1", "all": ["ckpt-1"]})");
  fs::rename(dir / "ckpt-2", dir / "ckpt-5");
  EXPECT_THAT(message_of<DataCorrupt>([&] { manager.latest(); }),
              HasSubstr((dir / "ckpt-5") + " is incomplete (it has no manifest.json) and is the highest-numbered"));
  // A damaged checkpoint below the latest one does not stop a resume, and saving never deletes it,
  // even when it is beyond max_to_keep.
  fs::rename(dir / "ckpt-5", dir / "ckpt-0");
  EXPECT_EQ(manager.latest(), dir / "ckpt-1");
  manager.save(make_checkpoint(1.0f, 3), 3);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"checkpoint", "ckpt-0", "ckpt-3"}));
  EXPECT_EQ(manager.latest(), dir / "ckpt-3");
}

TEST(CheckpointTest, PointerToACheckpointThatIsGoneWithNoneLeftIsDamage) {
  ScratchDir dir;
  CheckpointManager manager(dir.path());
  manager.save(make_checkpoint(1.0f, 4), 4);
  fs::remove_all(dir / "ckpt-4");
  std::string msg = message_of<DataCorrupt>([&] { manager.latest(); });
  EXPECT_THAT(msg, HasSubstr((dir / "checkpoint") + " names ckpt-4 as the latest checkpoint, but " + (dir / "ckpt-4") +
                             " is gone and no complete checkpoint is left"));
  write_bytes(dir / "checkpoint", R"({"latest": "model.bin", "all": []})");
  EXPECT_THAT(message_of<DataCorrupt>([&] { manager.latest(); }), HasSubstr("not a ckpt-<n> name"));
  fs::remove(dir / "checkpoint");
  EXPECT_EQ(manager.latest(), std::nullopt);
}

TEST(CheckpointTest, CorruptPointerFileIsReported) {
  ScratchDir dir;
  CheckpointManager manager(dir.path());
  manager.save(make_checkpoint(1.0f, 1), 1);
  write_bytes(dir / "checkpoint", "{not json");
  EXPECT_THAT(message_of<DataCorrupt>([&] { manager.latest(); }), HasSubstr(dir / "checkpoint"));
  write_bytes(dir / "checkpoint", R"({"latest": 3})");
  EXPECT_THAT(message_of<DataCorrupt>([&] { manager.latest(); }), HasSubstr("not a strata checkpoint pointer"));
  // Saving still works and rewrites the pointer from what the directory holds.
  manager.save(make_checkpoint(1.0f, 2), 2);
  EXPECT_EQ(manager.latest(), dir / "ckpt-2");
  EXPECT_EQ(read_json(dir / "checkpoint")["all"], nlohmann::json::array({"ckpt-1", "ckpt-2"}));
}

// A pid that no process has: a child that exited and was reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  EXPECT_GT(child, 0);
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
  return child;
}

TEST(CheckpointTest, SaveRemovesTheTemporariesOfDeadWritersOnly) {
  ScratchDir dir;
  CheckpointManager manager(dir.path());
  manager.save(make_checkpoint(1.0f, 1), 1);
  const std::string dead = std::to_string(dead_pid());
  const std::string live = std::to_string(::getppid());  // whoever started this test is still running
  const std::string self = std::to_string(::getpid());
  ASSERT_TRUE(::kill(std::stoi(live), 0) == 0 || errno == EPERM);
  // A killed writer's litter: a half-written checkpoint, the aside name of a replace, a pointer and a file.
  fs::create_directories(dir / (".ckpt-4.tmp-" + dead + "-0/sub"));
  write_bytes(dir / (".ckpt-4.tmp-" + dead + "-0/model.safetensors.tmp-" + dead + "-1"), "half");
  fs::create_directory(dir / (".ckpt-5.tmp-" + dead + "-2.old"));
  write_bytes(dir / ("checkpoint.tmp-" + dead + "-3"), "{");
  write_bytes(dir / ("model.safetensors.tmp-" + dead + "-4"), "x");
  // Another live process's work in progress: kept.
  fs::create_directory(dir / (".ckpt-6.tmp-" + live + "-0"));
  write_bytes(dir / ("checkpoint.tmp-" + live + "-1"), "{");
  // This process: a temporary it is not writing (left by a failed cleanup, or a reused pid) goes; one it
  // is writing stays.
  fs::create_directory(dir / (".ckpt-7.tmp-" + self + "-999999"));
  const std::string writing = dir / ("checkpoint.tmp-" + self + "-888888");
  detail::TempInProgress in_progress(writing);
  write_bytes(writing, "{");
  // Not temporaries: kept whatever their look.
  write_bytes(dir / "notes.txt", "mine");
  write_bytes(dir / "x.tmp-abc-1", "mine");
  write_bytes(dir / ".tmp-1-1", "mine");

  manager.save(make_checkpoint(1.0f, 2), 2);
  std::vector<std::string> kept = {".ckpt-6.tmp-" + live + "-0", ".tmp-1-1", "checkpoint", "checkpoint.tmp-" + live + "-1",
                                   writing.substr(dir.path().size() + 1), "ckpt-1", "ckpt-2", "notes.txt", "x.tmp-abc-1"};
  std::sort(kept.begin(), kept.end());  // entries() is sorted, and the pids' digits decide where theirs go
  EXPECT_EQ(dir.entries(), kept);
  EXPECT_EQ(manager.latest(), dir / "ckpt-2");
}

TEST(CheckpointTest, TempWriterPidParsesTemporaryNamesOnly) {
  EXPECT_EQ(detail::temp_writer_pid(".ckpt-3.tmp-1234-5"), 1234);
  EXPECT_EQ(detail::temp_writer_pid(".ckpt-3.tmp-1234-5.old"), 1234);
  EXPECT_EQ(detail::temp_writer_pid("checkpoint.tmp-77-0"), 77);
  EXPECT_EQ(detail::temp_writer_pid("checkpoint.tmp-77-"), std::nullopt);
  EXPECT_EQ(detail::temp_writer_pid("checkpoint.tmp--1-0"), std::nullopt);
  EXPECT_EQ(detail::temp_writer_pid("checkpoint.tmp-0-0"), std::nullopt);
  EXPECT_EQ(detail::temp_writer_pid("checkpoint.tmp-99999999999-0"), std::nullopt);
  EXPECT_EQ(detail::temp_writer_pid(".tmp-5-0"), std::nullopt);
  EXPECT_EQ(detail::temp_writer_pid("ckpt-3"), std::nullopt);
}

TEST(CheckpointTest, SaveRejectsBadArguments) {
  ScratchDir dir;
  CheckpointManager manager(dir.path());
  TrainingCheckpoint c = make_checkpoint(1.0f, 1);
  EXPECT_THROW(manager.save(c, -1), InvalidArgument);
  c.extra_json = "[1, 2]";
  EXPECT_THAT(message_of<InvalidArgument>([&] { manager.save(c, 1); }), HasSubstr("not an object"));
  c.extra_json = "{oops";
  EXPECT_THAT(message_of<InvalidArgument>([&] { manager.save(c, 1); }), HasSubstr("extra_json is not valid JSON"));
  c.extra_json = "{}";
  c.weights.push_back({"dense/bias", Tensor::zeros({1})});
  EXPECT_THAT(message_of<InvalidArgument>([&] { manager.save(c, 1); }),
              HasSubstr("two tensors are named 'dense/bias'"));
  EXPECT_TRUE(dir.entries().empty());  // the temporary directory is gone
}

TEST(CheckpointTest, FailedSaveLeavesThePreviousCheckpointsAsTheyWere) {
  ScratchDir dir;
  CheckpointManager manager(dir.path(), 1);
  manager.save(make_checkpoint(1.0f, 1), 1);
  const std::string model_before = read_bytes(dir / "ckpt-1/model.safetensors");
  const std::string pointer_before = read_bytes(dir / "checkpoint");
  TrainingCheckpoint big = make_checkpoint(2.0f, 2);
  big.weights.push_back({"huge", Tensor::zeros({1 << 20})});
  for (int64_t number : {2, 1}) {  // a new number, and replacing the existing one
    SCOPED_TRACE(number);
    strata::test::FileSizeLimit limit(64 * 1024);
    EXPECT_THROW(manager.save(big, number), IoError);
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"checkpoint", "ckpt-1"}));
  EXPECT_EQ(read_bytes(dir / "ckpt-1/model.safetensors"), model_before);
  EXPECT_EQ(read_bytes(dir / "checkpoint"), pointer_before);
  EXPECT_EQ(CheckpointManager::restore(*manager.latest()).step, 1);
}

TEST(CheckpointTest, RestoreReportsMissingAndInconsistentFiles) {
  ScratchDir dir;
  CheckpointManager manager(dir.path());
  const std::string path = manager.save(make_checkpoint(1.0f, 1), 1);
  EXPECT_THAT(message_of<IoError>([&] { CheckpointManager::restore(dir / "ckpt-77"); }), HasSubstr("no manifest.json"));

  // The manifest lists a shape the file does not hold.
  const std::string manifest = read_bytes(path + "/manifest.json");
  auto m = nlohmann::json::parse(manifest);
  m["model"][1]["shape"] = {4};
  write_bytes(path + "/manifest.json", m.dump());
  std::string msg = message_of<DataCorrupt>([&] { CheckpointManager::restore(path); });
  EXPECT_THAT(msg, HasSubstr("model.safetensors does not hold what"));
  EXPECT_THAT(msg, HasSubstr("tensor 'dense/bias' has shape [3] but [4] was expected"));

  m = nlohmann::json::parse(manifest);
  m["version"] = kCheckpointFormatVersion + 1;
  write_bytes(path + "/manifest.json", m.dump());
  EXPECT_THAT(message_of<DataCorrupt>([&] { CheckpointManager::restore(path); }), HasSubstr("newer"));

  m = nlohmann::json::parse(manifest);
  m["rng"].erase("seed");
  write_bytes(path + "/manifest.json", m.dump());
  EXPECT_THAT(message_of<DataCorrupt>([&] { CheckpointManager::restore(path); }), HasSubstr("manifest.json"));

  write_bytes(path + "/manifest.json", manifest);
  const std::string opt = read_bytes(path + "/optimizer.safetensors");
  write_bytes(path + "/optimizer.safetensors", opt.substr(0, opt.size() - 3));
  EXPECT_THAT(message_of<DataCorrupt>([&] { CheckpointManager::restore(path); }), HasSubstr("optimizer.safetensors"));
  fs::remove(path + "/optimizer.safetensors");
  EXPECT_THAT(message_of<IoError>([&] { CheckpointManager::restore(path); }), HasSubstr("optimizer.safetensors"));
}

}  // namespace
}  // namespace strata::io
