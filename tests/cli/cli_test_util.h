// Helpers of the end-to-end CLI tests: a scratch directory, tiny Fashion-MNIST-shaped IDX data sets and job
// files, running the real `strata` binary (STRATA_BINARY) as a shell command, and comparing the weights it wrote.
// Thread-safety: none needed; each test uses its own scratch directory.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>
#include <utility>

#include <gtest/gtest.h>

#include "strata/io/safetensors.h"

namespace strata::cli {

namespace fs = std::filesystem;

// The whole of a file ("" when it cannot be read).
inline std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name)
      : dir(fs::temp_directory_path() / ("strata_cli_test_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

inline void write_be32(std::ofstream& out, uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  out.write(reinterpret_cast<const char*>(b), 4);
}

// Fashion-MNIST-shaped IDX files where class k lights rows 2k..2k+1 (plus noise): a linear model learns it.
inline void write_tiny_idx(const fs::path& dir, const std::string& prefix, int n, uint32_t seed) {
  std::ofstream images(dir / (prefix + "-images-idx3-ubyte"), std::ios::binary);
  std::ofstream labels(dir / (prefix + "-labels-idx1-ubyte"), std::ios::binary);
  write_be32(images, 0x00000803);
  write_be32(images, n);
  write_be32(images, 28);
  write_be32(images, 28);
  write_be32(labels, 0x00000801);
  write_be32(labels, n);
  uint32_t state = seed;
  auto next = [&state] { return state = state * 1664525u + 1013904223u; };
  for (int i = 0; i < n; ++i) {
    const int label = static_cast<int>(next() >> 24) % 10;
    labels.put(static_cast<char>(label));
    for (int r = 0; r < 28; ++r) {
      for (int c = 0; c < 28; ++c) {
        int v = static_cast<int>(next() >> 26);  // noise 0..63
        if (r / 2 == label) v += 180;
        images.put(static_cast<char>(v));
      }
    }
  }
}

inline std::string write_job(const fs::path& dir, const std::string& body) {
  const fs::path path = dir / "job.yaml";
  std::ofstream(path) << body;
  return path.string();
}

inline std::string tiny_job(const fs::path& data_dir) {
  return "data:\n  format: idx\n  directory: " + data_dir.string() +
         "\n  shuffle: 512\nmodel:\n  - flatten\n  - dense: {units: 10}\n"
         "loss: {name: sparse_categorical_crossentropy, from_logits: true}\n"
         "optimizer: {name: adam, learning_rate: 0.01}\nmetrics: [accuracy]\nepochs: 2\nbatch_size: 32\n";
}

// A tiny Fashion-MNIST-shaped job in its own scratch directory: `train_examples` training and 64 test images.
struct TinyJob {
  Scratch s;
  std::string job;
  explicit TinyJob(const std::string& name, int train_examples = 512) : s(name) {
    write_tiny_idx(s.dir, "train", train_examples, 1);
    write_tiny_idx(s.dir, "t10k", 64, 2);
    job = write_job(s.dir, tiny_job(s.dir));
  }
};

// The "test loss ... - test accuracy ..." line each worker of a `strata launch` run printed, in output order.
inline std::vector<std::string> worker_test_lines(const std::string& out) {
  const std::regex line(R"(\[worker:\d\] (test loss [0-9.]+ - test accuracy [0-9.]+))");
  std::vector<std::string> lines;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) lines.push_back((*it)[1]);
  return lines;
}

// The training loss the progress bar showed at the end of epoch `epoch` (the chief's, under `strata launch`); ""
// when it showed none.
inline std::string epoch_loss(const std::string& out, int epoch) {
  std::smatch m;
  const std::regex line("(?:\\[worker:0\\] )?Epoch " + std::to_string(epoch) +
                        R"(/\d+\n(?:.*\n)*?(?:\[worker:0\] )?\d+/\d+ .* - loss: ([0-9.e+-]+))");
  return std::regex_search(out, m, line) ? m[1].str() : "";
}

// Runs a shell command; returns its exit status and output (stdout + stderr).
inline std::pair<int, std::string> run(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output};
}

// Converts the IDX files in `dir` (write_tiny_idx) to TFRecord shards in dir/shards with `strata data convert
// --shards N [--compression C]`, and returns the text of a tiny_job that trains on them.
inline std::string tiny_tfrecord_job(const fs::path& dir, int shards, const std::string& compression = "") {
  const fs::path out = dir / "shards";
  const auto [rc, log] = run(std::string(STRATA_BINARY) + " data convert --from idx " + dir.string() + " --to tfrecord " +
                             out.string() + " --shards " + std::to_string(shards) +
                             (compression.empty() ? "" : " --compression " + compression));
  EXPECT_EQ(rc, 0) << log;
  return std::regex_replace(tiny_job(dir), std::regex("  format: idx\n  directory: [^\n]*\n"),
                            "  format: tfrecord\n  train: [" + (out / "train-*").string() + "]\n  test: [" +
                                (out / "test-*").string() + "]\n" +
                                (compression.empty() ? "" : "  compression: " + compression + "\n"));
}

// XORs the byte of `file` at `offset` (from the end when `from_end`) with `mask`: damage on purpose.
inline void flip_byte(const fs::path& file, std::streamoff offset, char mask, bool from_end = false) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << "cannot open " << file;
  f.seekg(offset, from_end ? std::ios::end : std::ios::beg);
  const char c = static_cast<char>(f.get());
  f.seekp(offset, from_end ? std::ios::end : std::ios::beg);
  f.put(static_cast<char>(c ^ mask));
}

inline std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

// The weights of two safetensors files are the same tensors, equal to float tolerance (1e-4, relative above 1): what
// a distributed run that trains to one process's result writes.
inline void expect_same_weights(const fs::path& want_file, const fs::path& got_file) {
  const io::NamedTensors want = io::load_safetensors(want_file.string());
  const io::NamedTensors got = io::load_safetensors(got_file.string());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first);
    const std::vector<float> g = got[i].second.to_vector<float>(), w = want[i].second.to_vector<float>();
    ASSERT_EQ(g.size(), w.size()) << want[i].first;
    for (size_t j = 0; j < w.size(); ++j) {
      ASSERT_NEAR(g[j], w[j], 1e-4 * std::max(1.0f, std::abs(w[j]))) << want[i].first << " element " << j;
    }
  }
}

}  // namespace strata::cli
