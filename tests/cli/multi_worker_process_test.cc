// MultiWorkerMirroredStrategy across real processes: this test binary runs itself as the workers (the
// MultiWorkerProcessChild test, which does nothing unless STRATA_MW_CHILD_OUT is set) under `strata launch` (gloo:
// 2 and 3 workers, and 2 workers x 2 local replicas) and under `mpirun` (2 workers); each worker runs the fit job
// and the custom-loop job of train/multi_worker_jobs.h with a different seed and writes its weights, and the
// parent checks every worker ends with what one process gets with the same global batch, to 1e-5. Every process
// runs under `timeout` and is killed on every path.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "cli/cli_test_util.h"
#include "strata/distribute/multi_worker.h"
#include "strata/io/safetensors.h"
#include "strata/threading.h"
#include "train/multi_worker_jobs.h"

namespace strata::distribute {
namespace {

namespace fs = std::filesystem;
using namespace test_jobs;
using cli::run;
using cli::Scratch;

// What one worker (or the one-process reference) ends with: the fit job's weights ("fit/<name>"), the custom
// loop's ("custom/<i>") and the custom loop's per-step losses ("custom_losses").
io::NamedTensors run_jobs(Strategy& strategy, uint64_t seed_offset) {
  io::NamedTensors out;
  for (auto& [name, t] : train(strategy, 1000 + seed_offset).weights) out.emplace_back("fit/" + name, t);
  const auto [weights, losses] = train_custom(strategy, 77 + seed_offset);
  for (size_t i = 0; i < weights.size(); ++i) out.emplace_back("custom/" + std::to_string(i), weights[i]);
  Tensor l = Tensor::empty({static_cast<int64_t>(losses.size())}, DType::kFloat32);
  for (size_t i = 0; i < losses.size(); ++i) l.data<float>()[i] = static_cast<float>(losses[i]);
  out.emplace_back("custom_losses", l);
  return out;
}

TEST(MultiWorkerProcessChild, Run) {
  const char* out = std::getenv("STRATA_MW_CHILD_OUT");
  if (out == nullptr) GTEST_SKIP() << "a worker of MultiWorkerProcessTest, run by it";
  set_num_threads(1);
  const char* local = std::getenv("STRATA_MW_LOCAL");
  MultiWorkerMirroredStrategy strategy(cluster::resolve_cluster_from_environment(),
                                       {.timeout = std::chrono::seconds(60)}, local ? std::atoi(local) : 1);
  const auto results = run_jobs(strategy, static_cast<uint64_t>(strategy.worker_index()));
  io::save_safetensors(std::string(out) + "-" + std::to_string(strategy.worker_index()) + ".safetensors", results,
                       {{"backend", strategy.backend()}});
}

// Runs `workers` workers of `local` replicas with `starter` ("launch" or "mpirun") and returns each one's results.
std::vector<io::NamedTensors> run_workers(const std::string& starter, int workers, int local, const fs::path& dir,
                                          std::string* backend) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string child = "env STRATA_MW_CHILD_OUT=" + (dir / "worker").string() +
                            " STRATA_MW_LOCAL=" + std::to_string(local) + " " + self +
                            " --gtest_filter=MultiWorkerProcessChild.Run";
  const std::string start = starter == "mpirun"
                                ? "env -u TF_CONFIG mpirun --allow-run-as-root --oversubscribe -np " +
                                      std::to_string(workers) + " "
                                : std::string(STRATA_BINARY) + " launch --workers " + std::to_string(workers) + " -- ";
  const auto [rc, output] = run("timeout -k 5 120 " + start + child);
  EXPECT_EQ(rc, 0) << output;
  std::vector<io::NamedTensors> results;
  for (int w = 0; w < workers; ++w) {
    const fs::path file = dir / ("worker-" + std::to_string(w) + ".safetensors");
    if (!fs::exists(file)) {
      ADD_FAILURE() << "worker " << w << " wrote no results\n" << output;
      return {};
    }
    std::map<std::string, std::string> metadata;
    results.push_back(io::load_safetensors(file.string(), &metadata));
    *backend = metadata["backend"];
  }
  return results;
}

TEST(MultiWorkerProcessTest, WorkerProcessesTrainToWhatOneProcessGetsWithTheSameGlobalBatch) {
  const io::NamedTensors reference = run_jobs(default_strategy(), 0);
  struct Case {
    std::string starter;
    int workers, local;
  };
  std::vector<Case> cases = {{"launch", 2, 1}, {"launch", 3, 1}, {"launch", 2, 2}};
  if (std::system("command -v mpirun > /dev/null 2>&1") == 0) cases.push_back({"mpirun", 2, 1});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.starter + ": " + std::to_string(c.workers) + " workers x " + std::to_string(c.local) +
                 " local replicas");
    Scratch s("mw_processes");
    std::string backend;
    const std::vector<io::NamedTensors> results = run_workers(c.starter, c.workers, c.local, s.dir, &backend);
    if (HasFailure()) return;
    EXPECT_EQ(backend, c.starter == "mpirun" ? "mpi" : "gloo");
    for (size_t w = 0; w < results.size(); ++w) {
      ASSERT_EQ(results[w].size(), reference.size()) << "worker " << w;
      for (size_t i = 0; i < reference.size(); ++i) {
        const auto& [name, want_t] = reference[i];
        ASSERT_EQ(results[w][i].first, name);
        const auto got = results[w][i].second.to_vector<float>(), want = want_t.to_vector<float>();
        ASSERT_EQ(got.size(), want.size()) << name;
        for (size_t k = 0; k < got.size(); ++k) {
          ASSERT_NEAR(got[k], want[k], 1e-5f * std::max(1.0f, std::fabs(want[k])))
              << "worker " << w << " " << name << " [" << k << "]";
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::distribute
