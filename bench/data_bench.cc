// Times the Fashion-MNIST TFRecord GZIP input pipeline (read, inflate, parse Example, decode the
// image, shuffle 10000, batch 64, normalize each batch to float) against two raw limits of the same
// machine, with as many threads: raw_inflate, zlib inflating the same shard files into memory (the
// limit the issue names), and raw_libdeflate, libdeflate inflating each file read whole, one gzip
// member per call (the fastest general decoder here, and what strata's reader inflates with): the
// pipeline's own limit. Prints one "name<TAB>records_per_second" line per measurement;
// bench/data_bench.py adds the PyTorch peer.
//
//   data_bench --threads 2 [--shards DIR] [--epochs 3] [--only raw|pipeline]
//
// The shards are written once (4 GZIP files of the 60000 training images, with `strata data convert`'s
// schema and zlib settings: data::image_shard_writer) from /usr/share/datasets/fashion-mnist unless
// --shards names a directory holding them.
// Threads: the raw limit inflates one file per thread; the pipeline reads `threads` files at once
// (num_parallel_reads), with map/shuffle/batch on the calling thread (1 thread: all on the caller).
// Thread-safety: a single-threaded driver.
#include <libdeflate.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "strata/data/convert.h"
#include "strata/data/dataset.h"
#include "strata/data/tfrecord.h"
#include "strata/data/tfrecord_dataset.h"
#include "strata/data/tfrecord_shards.h"
#include "strata/threading.h"

namespace {

using namespace strata;
namespace fs = std::filesystem;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The shards `strata data convert --shards N --compression gzip` writes (its default zlib settings),
// written once into `dir`.
std::vector<std::string> ensure_shards(const std::string& dir, const std::string& idx_dir, int shards) {
  std::vector<std::string> files;
  for (int s = 0; s < shards; ++s)
    files.push_back((fs::path(dir) / data::shard_file_name("train", s, shards, data::Compression::kGzip)).string());
  bool all = true;
  for (const auto& f : files) all = all && fs::exists(f);
  if (all) return files;
  const std::string tmp = dir + ".tmp";
  fs::remove_all(tmp);
  const auto written =
      data::write_idx_shards(idx_dir, data::Split::kTrain, tmp,
                             {.shards = shards, .writer = data::image_shard_writer(data::Compression::kGzip)});
  fs::create_directories(dir);
  for (size_t s = 0; s < files.size(); ++s) fs::rename(written.paths[s], files[s]);
  fs::remove_all(tmp);
  return files;
}

// Inflates every file into memory (a 1 MiB output buffer, reused); returns the uncompressed bytes.
uint64_t inflate_file(const std::string& path, std::vector<char>& in, std::vector<char>& out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  z_stream z{};
  inflateInit2(&z, 16 + MAX_WBITS);
  uint64_t total = 0;
  for (;;) {
    if (z.avail_in == 0) {
      z.avail_in = static_cast<uInt>(std::fread(in.data(), 1, in.size(), f));
      z.next_in = reinterpret_cast<Bytef*>(in.data());
      if (z.avail_in == 0) break;
    }
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&z, Z_NO_FLUSH);
    total += out.size() - z.avail_out;
    if (rc == Z_STREAM_END) {
      inflateReset(&z);  // another gzip member may follow (as TensorFlow's reader does)
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      std::fprintf(stderr, "data_bench: zlib cannot inflate %s\n", path.c_str());
      std::exit(1);
    }
  }
  inflateEnd(&z);
  std::fclose(f);
  return total;
}

// Reads the whole file and inflates it with libdeflate, one call per gzip member, into buffers reused
// from file to file (each member over the last); returns the uncompressed bytes.
uint64_t libdeflate_file(const std::string& path, libdeflate_decompressor* d, std::vector<char>& in,
                         std::vector<char>& out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  std::fseek(f, 0, SEEK_END);
  in.resize(static_cast<size_t>(std::ftell(f)));
  std::rewind(f);
  in.resize(std::fread(in.data(), 1, in.size(), f));
  std::fclose(f);
  uint32_t isize = 0;
  if (in.size() >= 4) std::memcpy(&isize, in.data() + in.size() - 4, 4);
  if (out.size() < isize) out.resize(isize);
  uint64_t total = 0;
  for (size_t pos = 0; pos < in.size();) {
    size_t used_in = 0, used_out = 0;
    const auto rc =
        libdeflate_gzip_decompress_ex(d, in.data() + pos, in.size() - pos, out.data(), out.size(), &used_in, &used_out);
    if (rc == LIBDEFLATE_INSUFFICIENT_SPACE) {
      out.resize(2 * out.size() + 4096);
      continue;
    }
    if (rc != LIBDEFLATE_SUCCESS) {
      std::fprintf(stderr, "data_bench: libdeflate cannot inflate %s\n", path.c_str());
      std::exit(1);
    }
    pos += used_in;
    total += used_out;
  }
  return total;
}

// One pass over the files, one file per thread at a time, inflated by zlib or libdeflate.
double raw_seconds(const std::vector<std::string>& files, int threads, bool libdeflate) {
  std::atomic<size_t> next{0};
  const double start = now_s();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      std::vector<char> in(256 << 10), out(1 << 20);
      libdeflate_decompressor* d = libdeflate_alloc_decompressor();
      for (size_t i; (i = next.fetch_add(1)) < files.size();)
        libdeflate ? libdeflate_file(files[i], d, in, out) : inflate_file(files[i], in, out);
      libdeflate_free_decompressor(d);
    });
  for (auto& t : pool) t.join();
  return now_s() - start;
}

// image/255 as float32, on a whole batch (one map call per batch, not per record).
data::Element normalize(const data::Element& e) {
  return data::Element({data::to_float(e[0], 1.0f / 255.0f), e[1]}, e.shared_names());
}

// One epoch of the pipeline; returns (seconds, records).
std::pair<double, int64_t> pipeline_epoch(const std::vector<std::string>& files, int threads, uint64_t seed) {
  const double start = now_s();
  auto ds = data::make_example_dataset(files, data::fashion_mnist_example_spec(),
                                       {.compression = data::Compression::kGzip, .num_parallel_reads = threads})
                .shuffle(10000, seed)
                .batch(64)
                .map(normalize);
  auto it = ds.make_iterator();
  int64_t records = 0;
  double checksum = 0;
  while (auto b = it.next()) {
    records += (*b)[0].dim(0);
    checksum += (*b)[0].data<float>()[0];
  }
  if (checksum < 0) std::printf("impossible\n");
  return {now_s() - start, records};
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, epochs = 3;
  std::string only;  // "raw" or "pipeline": time one side only (for profiling)
  // (a new name when the writer settings change, so old shards are not timed by mistake)
  std::string shards_dir = (fs::temp_directory_path() / "strata_data_bench_plain_gzip").string();
  std::string idx_dir = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--epochs")
      epochs = std::atoi(argv[i + 1]);
    else if (a == "--shards")
      shards_dir = argv[i + 1];
    else if (a == "--idx")
      idx_dir = argv[i + 1];
    else if (a == "--only")
      only = argv[i + 1];
    else {
      std::fprintf(stderr,
                   "usage: data_bench --threads N [--epochs E] [--shards DIR] [--idx DIR] [--only raw|pipeline]\n");
      return 2;
    }
  }
  set_num_threads(1);  // the pipeline's own threads are the parallelism measured
  const auto files = ensure_shards(shards_dir, idx_dir, 4);
  const int64_t records = 60000;
  raw_seconds(files, threads, false);  // warm the page cache
  pipeline_epoch(files, threads, 0);
  // Alternate raw and pipeline runs so the noise of a shared machine falls on both; keep the best.
  double best_raw = 1e30, best_deflate = 1e30, best_pipe = 1e30;
  int64_t pipe_records = 0;
  for (int e = 0; e < epochs; ++e) {
    if (only != "pipeline") {
      best_raw = std::min(best_raw, raw_seconds(files, threads, false));
      best_deflate = std::min(best_deflate, raw_seconds(files, threads, true));
    }
    if (only == "raw") {
      pipe_records = records;
      continue;
    }
    const auto [s, n] = pipeline_epoch(files, threads, static_cast<uint64_t>(e + 1));
    best_pipe = std::min(best_pipe, s);
    pipe_records = n;
  }
  if (pipe_records != records) {
    std::fprintf(stderr, "data_bench: the pipeline gave %lld records, expected %lld\n",
                 static_cast<long long>(pipe_records), static_cast<long long>(records));
    return 1;
  }
  if (only != "pipeline") {
    std::printf("raw_inflate\t%.1f\n", static_cast<double>(records) / best_raw);
    std::printf("raw_libdeflate\t%.1f\n", static_cast<double>(records) / best_deflate);
  }
  if (only != "raw") std::printf("pipeline\t%.1f\n", static_cast<double>(records) / best_pipe);
  return 0;
}
