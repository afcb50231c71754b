// Helpers the `strata launch` suites share: a string quoted for `sh -c`, a file's text and lines, and the check
// that every process a test's tasks recorded is gone.
// Thread-safety: plain functions.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace strata::cli {

// `s` as one word for sh -c.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every pid listed in `file` (one a line) must be gone: kill(pid, 0) fails with ESRCH.
inline void expect_all_gone(const std::filesystem::path& file, size_t expected_pids) {
  const std::vector<std::string> pids = lines_of(read_text(file));
  EXPECT_EQ(pids.size(), expected_pids) << read_text(file);
  for (const auto& p : pids) {
    const pid_t pid = std::stoi(p);
    errno = 0;
    EXPECT_EQ(::kill(pid, 0), -1) << "process " << pid << " was left behind";
    EXPECT_EQ(errno, ESRCH) << pid;
  }
}

}  // namespace strata::cli
