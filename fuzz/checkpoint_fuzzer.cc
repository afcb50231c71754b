// Fuzzes the checkpoint files strata reads as JSON (src/io/checkpoint.cc): a ckpt-<n>'s manifest.json, read by
// CheckpointManager::restore beside real tensor files, and the directory's pointer file "checkpoint", read by
// latest() and checkpoints(). Input: one mode byte (bit 0: the bytes are the pointer file, else the manifest), then
// the file. The checkpoint they describe is written once per process by CheckpointManager::save.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "fuzz_util.h"
#include "strata/io/checkpoint.h"

using namespace strata;

namespace {

// A directory holding ckpt-1 and ckpt-2 (complete, with model, optimizer and input tensors) and a pointer file.
const std::string& checkpoints() {
  static const std::string dir = [] {
    const std::string d = fuzz::scratch_dir() + "/checkpoints";
    io::CheckpointManager manager(d, 0);
    io::TrainingCheckpoint c;
    c.weights = {{"dense/kernel", Tensor::ones({2, 3})}, {"dense/bias", Tensor::zeros({3})}};
    c.optimizer = {{"iterations", Tensor::zeros({}, DType::kInt64)}};
    c.input = {{"iterator", Tensor::zeros({4}, DType::kUInt8)}};
    c.step = 7;
    c.epoch = 1;
    c.extra_json = R"({"note": "fuzz"})";
    manager.save(c, 1);
    manager.save(c, 2);
    return d;
  }();
  return dir;
}

// Reads a whole file (the real manifest or pointer file, kept to put back after each input).
std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Puts `bytes` at `path` by a rename (no copy_file: its sendfile fails with EINTR under libFuzzer's timer signal).
void replace_file(const std::string& path, const std::string& bytes) {
  std::filesystem::rename(fuzz::write_scratch("next", bytes), path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string& dir = checkpoints();
  static const std::string pointer_file = dir + "/checkpoint", manifest_file = dir + "/ckpt-2/manifest.json";
  static const std::string real_pointer = read_all(pointer_file), real_manifest = read_all(manifest_file);
  const bool pointer = (data[0] & 1) != 0;
  const std::string& file = pointer ? pointer_file : manifest_file;
  replace_file(file, std::string(fuzz::as_view(data + 1, size - 1)));
  try {
    if (pointer) {
      io::CheckpointManager manager(dir, 0);
      (void)manager.latest();
      (void)manager.checkpoints();
    } else {
      (void)io::CheckpointManager::restore(dir + "/ckpt-2");
    }
  } catch (const Error&) {
  }
  replace_file(file, pointer ? real_pointer : real_manifest);  // the next input starts from the real checkpoint
  return 0;
}
