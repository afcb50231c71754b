// Helpers shared by the comm tests: a group's ranks run on threads, substring checks, and a scratch
// directory for file stores and forked ranks.
// Thread-safety: run_ranks starts one thread per rank and joins them; the rest share no state.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "strata/comm/communicator.h"

namespace strata::test {

using Group = std::vector<std::shared_ptr<comm::Communicator>>;

// Runs fn(rank, communicator) on one thread per rank and joins them.
inline void run_ranks(const Group& group, const std::function<void(int, comm::Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < group.size(); ++r) threads.emplace_back([&, r] { fn(static_cast<int>(r), *group[r]); });
  for (auto& t : threads) t.join();
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A fresh directory under the system temp dir ("<stem>_XXXXXX"), removed with its contents at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& stem = "strata_comm_test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (stem + "_XXXXXX")).string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace strata::test
