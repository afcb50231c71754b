// comm_bench: strata's gloo and mpi backends beside raw Gloo and raw MPI calls on the same buffers, in the same
// processes.
//
// For 2 and 4 processes and sizes 1 KB .. 64 MB it times all_reduce (sum), broadcast (root 0) and all_gather (the
// size is the gathered output) through strata::comm and through the library underneath it on the same float32
// buffers, alternating the two in rounds, and prints per-op latency (best round's mean, rank 0's clock), bus
// bandwidth (NCCL's convention) and the ratio.
//   gloo (default): forks the ranks itself (127.0.0.1 TCP); strata's make_gloo_communicator over a file store beside
//     Gloo's options-style functions on a second Gloo context of the same processes.
//   mpi: one rank of a job that mpirun started (its -np is the process count); strata's make_mpi_communicator beside
//     MPI_Allreduce (MPI_IN_PLACE) / MPI_Bcast / MPI_Allgather on a duplicate of MPI_COMM_WORLD. Needs
//     MPI_THREAD_MULTIPLE (the raw calls come from the main thread while strata's worker thread owns its own calls).
//   comm_bench [--procs 2,4] [--max-mb 64] [--rounds 3] [--json]
//   comm_bench --procs 2 --step-compute-us C --step-bytes B [--steps 300] [--json]
// The second form is the training-step ceiling on raw Gloo (bench/multiworker_bench.py): each rank repeats a step of
// C us of arithmetic on its own core's time (the compute a worker's step does) followed by a raw Gloo ring
// all-reduce of B bytes of float32 (its gradients), and rank 0 prints the mean seconds per step: what any trainer
// whose steps compute that long and all-reduce that much on Gloo can reach on this machine, with no overlap.
//   mpirun --allow-run-as-root --oversubscribe --bind-to none -np N comm_bench --backend mpi [--max-mb 64] ...
// --json prints one JSON object per row instead of the table (bench/comm_bench.py reads it, and starts mpirun).
// Thread-safety: a program; each process is single-threaded apart from the libraries' own threads.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <mpi.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "strata/comm/gloo.h"
#include "strata/comm/mpi.h"
#include "strata/comm/store.h"
#include "strata/tensor.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace strata;

enum class Coll { kAllReduce, kBroadcast, kAllGather };
const char* coll_name(Coll c) {
  return c == Coll::kAllReduce ? "all_reduce" : c == Coll::kBroadcast ? "broadcast" : "all_gather";
}

// NCCL's bus bandwidth: bytes a link carries per second, comparable across sizes and process counts.
double bus_gbps(Coll c, size_t bytes, int n, double seconds) {
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  switch (c) {
    case Coll::kAllReduce:
      return algbw * 2.0 * (n - 1) / n;
    case Coll::kBroadcast:
      return algbw;
    case Coll::kAllGather:
      return algbw * (n - 1) / n;
  }
  return algbw;
}

std::string human(size_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MB";
  return std::to_string(bytes >> 10) + " KB";
}

// Which library a run compares strata against, and the names its rows carry.
struct Backend {
  const char* name;    // "gloo" or "mpi": the JSON rows' "backend"
  const char* strata;  // "strata gloo"
  const char* raw;     // "raw Gloo"
};
constexpr Backend kGloo{"gloo", "strata gloo", "raw Gloo"};
constexpr Backend kMpi{"mpi", "strata mpi", "raw MPI"};

void print_header(const Backend& b, int rounds) {
  std::printf("# %s backend vs %s (same buffers, same processes)%s\n", b.strata, b.raw,
              std::strcmp(b.name, "gloo") == 0 ? ", 127.0.0.1 TCP" : ", mpirun on this host");
  std::printf("# latency: mean per op of the best of %d rounds; busbw in GB/s (NCCL convention)\n", rounds);
  std::printf("%5s  %-10s %7s  %11s  %11s  %7s  %9s  %9s  %9s\n", "procs", "collective", "size", "strata_us", "raw_us",
              "ratio", "strata_bw", "raw_bw", "added_us");
  std::fflush(stdout);
}

// The raw library's call for one collective on the benchmark's buffers: `in_numel` floats in `buffer` (in place for
// all_reduce and broadcast from rank 0), `in_numel * n` floats in `output` for all_gather.
using RawCall = std::function<void(Coll, float* buffer, float* output, size_t in_numel)>;

// Every collective and size, strata's side and the raw side alternating in rounds; rank 0 prints the rows. The same
// loop serves both backends, so they are timed alike: strata's barrier, one warm-up op, then
// clamp(64 MB / size, 3, 100) ops, the mean per op, the best of `rounds` rounds.
// `ceiling_call`, when given, is a third side timed alike: the raw engine used as strata has to use it (mpi: the
// non-blocking calls a backend with timeouts must make), printed as "ceiling_us".
void run_collectives(const Backend& backend, comm::Communicator& strata_comm, const RawCall& raw_call, size_t max_bytes,
                     int rounds, bool json, const RawCall* ceiling_call = nullptr) {
  const int rank = strata_comm.rank(), n = strata_comm.size();
  for (Coll c : {Coll::kAllReduce, Coll::kBroadcast, Coll::kAllGather}) {
    for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
      const size_t numel = bytes / sizeof(float);
      const size_t in_numel = c == Coll::kAllGather ? std::max<size_t>(1, numel / n) : numel;
      Tensor buffer = Tensor::full({static_cast<int64_t>(in_numel)}, 1.0 + rank);
      Tensor output = Tensor::zeros({static_cast<int64_t>(in_numel * n)});
      const int iters = static_cast<int>(std::clamp<size_t>((size_t{64} << 20) / bytes, 3, 100));

      auto strata_op = [&] {
        switch (c) {
          case Coll::kAllReduce:
            strata_comm.all_reduce({buffer}, comm::ReduceOp::kSum)->wait();
            return;
          case Coll::kBroadcast:
            strata_comm.broadcast({buffer}, 0)->wait();
            return;
          case Coll::kAllGather:
            strata_comm.all_gather(buffer, output)->wait();
            return;
        }
      };
      auto raw_op = [&] { raw_call(c, buffer.data<float>(), output.data<float>(), in_numel); };
      auto ceiling_op = [&] { (*ceiling_call)(c, buffer.data<float>(), output.data<float>(), in_numel); };
      auto time_it = [&](const std::function<void()>& op) {
        strata_comm.barrier();
        op();  // warm-up
        const auto start = Clock::now();
        for (int i = 0; i < iters; ++i) op();
        return std::chrono::duration<double>(Clock::now() - start).count() / iters;
      };
      double best_strata = 1e30, best_raw = 1e30, best_ceiling = 1e30;
      for (int round = 0; round < rounds; ++round) {
        // Alternate which goes first, so neither always follows the other.
        if (round % 2 == 0) {
          best_strata = std::min(best_strata, time_it(strata_op));
          best_raw = std::min(best_raw, time_it(raw_op));
        } else {
          best_raw = std::min(best_raw, time_it(raw_op));
          best_strata = std::min(best_strata, time_it(strata_op));
        }
        if (ceiling_call != nullptr) best_ceiling = std::min(best_ceiling, time_it(ceiling_op));
      }
      if (rank != 0) continue;
      const size_t moved = c == Coll::kAllGather ? in_numel * n * sizeof(float) : bytes;
      if (json) {
        std::printf(
            "{\"backend\": \"%s\", \"strata_side\": \"%s\", \"raw_side\": \"%s\", \"procs\": %d, \"collective\": "
            "\"%s\", \"bytes\": %zu, \"strata_us\": %.3f, \"raw_us\": %.3f, \"strata_busbw\": %.6f, "
            "\"raw_busbw\": %.6f%s}\n",
            backend.name, backend.strata, backend.raw, n, coll_name(c), bytes, best_strata * 1e6, best_raw * 1e6,
            bus_gbps(c, moved, n, best_strata), bus_gbps(c, moved, n, best_raw),
            ceiling_call ? (", \"ceiling_us\": " + std::to_string(best_ceiling * 1e6)).c_str() : "");
      } else {
        std::printf("%5d  %-10s %7s  %11.1f  %11.1f  %7.3f  %9.3f  %9.3f  %+9.1f\n", n, coll_name(c),
                    human(bytes).c_str(), best_strata * 1e6, best_raw * 1e6, best_strata / best_raw,
                    bus_gbps(c, moved, n, best_strata), bus_gbps(c, moved, n, best_raw),
                    (best_strata - best_raw) * 1e6);
      }
      std::fflush(stdout);
    }
  }
  strata_comm.barrier();
}

// A training step's shape for the step ceiling: `compute_us` of arithmetic, then an all-reduce of `bytes`.
struct StepShape {
  double compute_us = 0;
  size_t bytes = 0;
  int steps = 300;
};

// Burns about `us` microseconds of this thread's CPU on arithmetic over a small buffer (a stand-in for a step's
// kernels: the core is busy, not asleep).
void compute_for(double us, std::vector<float>& scratch) {
  const auto until = Clock::now() + std::chrono::duration<double, std::micro>(us);
  float acc = 1.0f;
  do {
    for (float& x : scratch) acc = x = x * 0.999f + acc * 1e-4f;
  } while (Clock::now() < until);
  if (acc == 12345.0f) std::puts("");  // keeps the loop from being optimised away
}

// The step ceiling on raw Gloo: `shape.steps` steps of compute then a ring all-reduce; rank 0 prints seconds/step.
void run_step_ceiling(const std::shared_ptr<gloo::rendezvous::Context>& raw, int rank, const StepShape& shape,
                      bool json) {
  std::vector<float> grads(shape.bytes / sizeof(float), 1.0f), scratch(4096, 0.5f);
  auto step = [&] {
    compute_for(shape.compute_us, scratch);
    gloo::AllreduceOptions opts(raw);
    opts.setOutput(grads.data(), grads.size());
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    gloo::allreduce(opts);
  };
  for (int i = 0; i < 10; ++i) step();  // warm-up
  const auto start = Clock::now();
  for (int i = 0; i < shape.steps; ++i) step();
  const double per_step = std::chrono::duration<double>(Clock::now() - start).count() / shape.steps;
  if (rank != 0) return;
  if (json) {
    std::printf("{\"step_s\": %.9f, \"compute_us\": %.1f, \"bytes\": %zu}\n", per_step, shape.compute_us, shape.bytes);
  } else {
    std::printf("raw Gloo step: %.1f us of compute + all_reduce of %zu bytes: %.1f us per step\n", shape.compute_us,
                shape.bytes, per_step * 1e6);
  }
}

// One forked process of the gloo benchmark (the step ceiling instead when `step` has bytes).
int run_gloo_rank(int rank, int n, const std::string& dir, size_t max_bytes, int rounds, bool json,
                  const StepShape& step = {}) {
  gloo::rendezvous::FileStore file_store(dir + "/raw");
  gloo::rendezvous::PrefixStore raw_store("raw", file_store);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto raw = std::make_shared<gloo::rendezvous::Context>(rank, n);
  raw->setTimeout(std::chrono::seconds(60));
  raw->connectFullMesh(raw_store, device);
  if (step.bytes > 0) {  // raw Gloo only
    run_step_ceiling(raw, rank, step, json);
    return 0;
  }
  auto store = comm::make_file_store(dir + "/strata", std::chrono::seconds(60));
  auto strata_comm = comm::make_gloo_communicator(store, rank, n, {.timeout = std::chrono::seconds(60)});

  auto raw_call = [&](Coll c, float* buffer, float* output, size_t in_numel) {
    switch (c) {
      case Coll::kAllReduce: {
        gloo::AllreduceOptions opts(raw);
        opts.setOutput(buffer, in_numel);
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        gloo::allreduce(opts);
        return;
      }
      case Coll::kBroadcast: {
        gloo::BroadcastOptions opts(raw);
        opts.setOutput(buffer, in_numel);
        opts.setRoot(0);
        gloo::broadcast(opts);
        return;
      }
      case Coll::kAllGather: {
        gloo::AllgatherOptions opts(raw);
        opts.setInput(buffer, in_numel);
        opts.setOutput(output, in_numel * n);
        gloo::allgather(opts);
        return;
      }
    }
  };
  run_collectives(kGloo, *strata_comm, raw_call, max_bytes, rounds, json);
  return 0;
}

// This process as one rank of an mpirun job: strata's mpi backend beside blocking MPI calls on a second duplicate
// of MPI_COMM_WORLD (make_mpi_communicator initialises MPI; its atexit handler finalises it).
int run_mpi_rank(size_t max_bytes, int rounds, bool json) {
  auto strata_comm = comm::make_mpi_communicator({.timeout = std::chrono::seconds(60)});
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "comm_bench: the raw MPI side needs MPI_THREAD_MULTIPLE (unset STRATA_MPI_THREAD_LEVEL)\n");
    return 1;
  }
  MPI_Comm raw = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &raw) != MPI_SUCCESS) {
    std::fprintf(stderr, "comm_bench: MPI_Comm_dup(MPI_COMM_WORLD) failed\n");
    return 1;
  }
  auto raw_call = [&](Coll c, float* buffer, float* output, size_t in_numel) {
    const int count = static_cast<int>(in_numel);
    int rc = MPI_SUCCESS;
    switch (c) {
      case Coll::kAllReduce:
        rc = MPI_Allreduce(MPI_IN_PLACE, buffer, count, MPI_FLOAT, MPI_SUM, raw);
        break;
      case Coll::kBroadcast:
        rc = MPI_Bcast(buffer, count, MPI_FLOAT, 0, raw);
        break;
      case Coll::kAllGather:
        rc = MPI_Allgather(buffer, count, MPI_FLOAT, output, count, MPI_FLOAT, raw);
        break;
    }
    if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("raw MPI ") + coll_name(c) + " failed");
  };
  // What any MPI backend with timeouts must do: post non-blocking calls and wait for them (here with MPI_Wait,
  // which polls back to back).
  const RawCall nonblocking_call = [&](Coll c, float* buffer, float* output, size_t in_numel) {
    const int count = static_cast<int>(in_numel);
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    switch (c) {
      case Coll::kAllReduce:
        rc = MPI_Iallreduce(MPI_IN_PLACE, buffer, count, MPI_FLOAT, MPI_SUM, raw, &request);
        break;
      case Coll::kBroadcast:
        rc = MPI_Ibcast(buffer, count, MPI_FLOAT, 0, raw, &request);
        break;
      case Coll::kAllGather:
        rc = MPI_Iallgather(buffer, count, MPI_FLOAT, output, count, MPI_FLOAT, raw, &request);
        break;
    }
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&request, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("raw non-blocking MPI ") + coll_name(c) + " failed");
  };
  if (!json && strata_comm->rank() == 0) print_header(kMpi, rounds);
  run_collectives(kMpi, *strata_comm, raw_call, max_bytes, rounds, json, &nonblocking_call);
  MPI_Comm_free(&raw);
  return 0;
}

// Forks `n` ranks; waits at most `limit` and kills whatever is left. Returns whether every rank exited 0.
bool run_group(int n, size_t max_bytes, int rounds, bool json, std::chrono::seconds limit, const StepShape& step = {}) {
  std::string pattern = (std::filesystem::temp_directory_path() / "strata_comm_bench_XXXXXX").string();
  const std::string dir = ::mkdtemp(pattern.data());
  ::mkdir((dir + "/raw").c_str(), 0755);
  std::vector<pid_t> pids;
  std::fflush(stdout);  // or each child prints the parent's buffered lines again
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(static_cast<unsigned>(limit.count()) + 5);
      int status = 1;
      try {
        status = run_gloo_rank(r, n, dir, max_bytes, rounds, json, step);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      ::_exit(status);
    }
    if (pid > 0) pids.push_back(pid);
  }
  bool ok = static_cast<int>(pids.size()) == n;
  const auto deadline = Clock::now() + limit;
  std::vector<bool> done(pids.size(), false);
  size_t left = pids.size();
  while (left > 0 && Clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (!done[i] && ::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        --left;
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (done[i]) continue;
    ::kill(pids[i], SIGKILL);
    ::waitpid(pids[i], nullptr, 0);
    ok = false;
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return ok;
}

}  // namespace

constexpr char kUsage[] =
    "usage: comm_bench [--backend gloo] [--procs 2,4] [--max-mb 64] [--rounds 3] [--json]\n"
    "       comm_bench --procs 2 --step-compute-us C --step-bytes B [--steps 300] [--json]\n"
    "       mpirun --allow-run-as-root --oversubscribe --bind-to none -np N comm_bench --backend mpi [--max-mb 64] "
    "[--rounds 3] [--json]\n";

int main(int argc, char** argv) {
  std::vector<int> procs = {2, 4};
  bool procs_given = false;
  std::string backend = "gloo";
  size_t max_mb = 64;
  int rounds = 3;
  bool json = false;
  StepShape step;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--json") {
      json = true;
      continue;
    }
    const std::string value = i + 1 < argc ? argv[++i] : "";
    if (value.empty()) {
      std::fputs(kUsage, stderr);
      return 2;
    } else if (flag == "--backend" && (value == "gloo" || value == "mpi")) {
      backend = value;
    } else if (flag == "--procs") {
      procs.clear();
      procs_given = true;
      for (size_t pos = 0; pos < value.size();) {
        const size_t comma = value.find(',', pos);
        procs.push_back(std::stoi(value.substr(pos, comma - pos)));
        pos = comma == std::string::npos ? value.size() : comma + 1;
      }
    } else if (flag == "--max-mb") {
      max_mb = std::stoul(value);
    } else if (flag == "--rounds") {
      rounds = std::stoi(value);
    } else if (flag == "--step-compute-us") {
      step.compute_us = std::stod(value);
    } else if (flag == "--step-bytes") {
      step.bytes = std::stoul(value);
    } else if (flag == "--steps") {
      step.steps = std::stoi(value);
    } else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (backend == "mpi") {
    // mpirun chose the processes: -np is the process count, and mpirun (or bench/comm_bench.py) bounds the run.
    if (procs_given || !comm::started_by_mpirun()) {
      std::fprintf(stderr,
                   "comm_bench: --backend mpi runs as one rank of an mpirun job, whose -np is the process "
                   "count (no --procs)\n%s",
                   kUsage);
      return 2;
    }
    ::alarm(600);
    try {
      return run_mpi_rank(max_mb << 20, rounds, json);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "comm_bench (mpi): %s\n", e.what());
      return 1;
    }
  }
  if (step.bytes > 0) {
    bool ok = true;
    for (int n : procs) ok = run_group(n, 0, 0, json, std::chrono::seconds(600), step) && ok;
    return ok ? 0 : 1;
  }
  if (!json) print_header(kGloo, rounds);
  bool ok = true;
  for (int n : procs) ok = run_group(n, max_mb << 20, rounds, json, std::chrono::seconds(600)) && ok;
  return ok ? 0 : 1;
}
