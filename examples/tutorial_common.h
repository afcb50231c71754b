// What the two tf.distribute tutorial examples share: their command-line flags, the data-set check and the
// tutorial's `scale` (uint8 pixels -> float32 in [0, 1], on a whole batch). Header-only, examples only.
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "strata/data/convert.h"
#include "strata/data/element.h"
#include "strata/error.h"

namespace tutorial {

struct Args {
  int replicas = 2;
  int64_t epochs = 0;  // each example sets its tutorial's EPOCHS
  int64_t steps = 0;   // 0: whole epochs
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string checkpoint_dir = "./training_checkpoints";
};

// --replicas, --epochs, --steps, --data, --checkpoint-dir (each with a value); others are InvalidArgument.
inline Args parse_args(int argc, char** argv, int64_t default_epochs) {
  Args a;
  a.epochs = default_epochs;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    STRATA_CHECK(i + 1 < argc, strata::InvalidArgument, flag << " needs a value");
    const std::string value = argv[++i];
    if (flag == "--replicas") {
      a.replicas = std::stoi(value);
    } else if (flag == "--epochs") {
      a.epochs = std::stoll(value);
    } else if (flag == "--steps") {
      a.steps = std::stoll(value);
    } else if (flag == "--data") {
      a.data = value;
    } else if (flag == "--checkpoint-dir") {
      a.checkpoint_dir = value;
    } else {
      STRATA_THROW(strata::InvalidArgument,
                   "unknown flag '" << flag << "'; known: --replicas, --epochs, --steps, --data, --checkpoint-dir");
    }
  }
  return a;
}

inline bool have_fashion_mnist(const std::string& dir) {
  namespace fs = std::filesystem;
  return fs::exists(dir + "/train-images-idx3-ubyte.gz") || fs::exists(dir + "/train-images-idx3-ubyte");
}

// When `dir` holds no Fashion-MNIST, says so (naming `program` and how to get it) and returns true; the
// examples then exit with 77, ctest's "skipped".
inline bool report_missing_fashion_mnist(const char* program, const std::string& dir) {
  if (have_fashion_mnist(dir)) return false;
  std::fprintf(stderr,
               "%s: no Fashion-MNIST in %s (train-images-idx3-ubyte[.gz] is missing); install Debian's "
               "dataset-fashion-mnist package (scripts/setup.sh does) or pass --data DIR\n",
               program, dir.c_str());
  return true;
}

// The tutorial's `scale`, on a whole batch at once.
inline strata::data::Element scale(const strata::data::Element& batch) {
  return strata::data::Element({strata::data::to_float(batch[0], 1.0f / 255.0f), batch[1]});
}

}  // namespace tutorial
