// A process the multi-node launcher tests start in the background: a shell command run with `exec` (so the
// pid is the command's own, e.g. a `strata launch` to kill), in its own process group, its stdout and stderr
// in a file. It is waited for with a deadline, and killed (its whole group, SIGKILL) and reaped by the
// destructor on every path, so a test that fails or times out leaves nothing behind.
// Thread-safety: none needed; each test owns its processes.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace strata::cli {

class BackgroundProcess {
 public:
  // Starts `/bin/sh -c 'exec COMMAND > LOG 2>&1'`.
  BackgroundProcess(const std::string& command, const std::filesystem::path& log) : log_(log) {
    const std::string script = "exec " + command + " > '" + log.string() + "' 2>&1";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    if (pid_ > 0) ::setpgid(pid_, pid_);
  }
  ~BackgroundProcess() {
    if (pid_ <= 0 || status_) return;
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }

  // The exit status (128 + the signal for a signal) once it has ended, or nullopt when it is still running
  // after `timeout`.
  std::optional<int> wait_for(std::chrono::duration<double> timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!status_) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
  }

  void signal(int sig) const { ::kill(pid_, sig); }

  // What it wrote so far.
  std::string output() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // Waits until its output contains `text`; false after `timeout` or when it ended without writing it.
  bool wait_for_output(const std::string& text, std::chrono::duration<double> timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (output().find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() >= deadline || wait_for(std::chrono::seconds(0))) {
        return output().find(text) != std::string::npos;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

}  // namespace strata::cli
