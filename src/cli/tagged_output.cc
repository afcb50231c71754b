// Prefixing a task's output lines under mpirun and srun (see tagged_output.h).
// Thread-safety: start before other threads exist; finish on the main thread.
#include "cli/tagged_output.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/prefixed_lines.h"
#include "strata/cluster/cluster_resolver.h"

namespace strata::cli {
namespace {

pid_t g_helper = -1;

long env_long(const char* name, long otherwise) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return otherwise;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  return *end == '\0' ? n : otherwise;
}

// The helper: copies each pipe to its stream, a prefixed whole line at a time, until both pipes close.
[[noreturn]] void run_helper(const std::string& prefix, int out_pipe, int err_pipe, int out_fd, int err_fd) {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) std::signal(sig, SIG_IGN);  // drain until EOF
  struct Channel {
    int in, out;
    PrefixedLines lines;
  } channels[2] = {{out_pipe, out_fd, {}}, {err_pipe, err_fd, {}}};
  int open = 2;
  while (open > 0) {
    pollfd fds[2];
    for (int i = 0; i < 2; ++i) fds[i] = {channels[i].in, POLLIN, 0};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      Channel& c = channels[i];
      if (c.in < 0 || fds[i].revents == 0) continue;
      char buf[16384];
      const ssize_t n = ::read(c.in, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        write_all(c.out, c.lines.feed(prefix, buf, static_cast<size_t>(n)));
        continue;
      }
      write_all(c.out, c.lines.rest(prefix));  // end of file (or an error): the last piece, then this channel is done
      ::close(c.in);
      c.in = -1;
      --open;
    }
  }
  ::_exit(0);
}

}  // namespace

std::string shared_output_tag() {
  const bool mpi = env_long("OMPI_COMM_WORLD_SIZE", 1) > 1;
  // An srun step (not the batch script itself, which has SLURM_PROCID too), as cluster resolution tells them apart.
  const bool step = std::getenv("SLURM_STEP_ID") != nullptr || std::getenv("SLURM_STEPID") != nullptr;
  const bool srun = step && std::getenv("SLURM_PROCID") != nullptr &&
                    env_long("SLURM_STEP_NUM_TASKS", env_long("SLURM_NTASKS", 1)) > 1;
  if (!mpi && !srun) return "";
  try {
    return cluster::resolve_cluster_from_environment().name();
  } catch (const std::exception&) {  // the command reports a bad environment itself; tag by the rank meanwhile
    return "rank " + std::to_string(mpi ? env_long("OMPI_COMM_WORLD_RANK", 0) : env_long("SLURM_PROCID", 0));
  }
}

bool start_tagged_output() {
  const std::string tag = shared_output_tag();
  if (tag.empty() || g_helper > 0) return false;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return false;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return false;
  }
  const int out_fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  const int err_fd = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  std::fflush(nullptr);
  const pid_t pid = out_fd >= 0 && err_fd >= 0 ? ::fork() : -1;
  if (pid == 0) {
    ::close(out[1]);
    ::close(err[1]);
    ::close(STDOUT_FILENO);
    ::close(STDERR_FILENO);
    run_helper("[" + tag + "] ", out[0], err[0], out_fd, err_fd);
  }
  ::close(out[0]);
  ::close(err[0]);
  if (pid < 0) {
    for (const int fd : {out[1], err[1], out_fd, err_fd}) {
      if (fd >= 0) ::close(fd);
    }
    return false;
  }
  ::dup2(out[1], STDOUT_FILENO);
  ::dup2(err[1], STDERR_FILENO);
  for (const int fd : {out[1], err[1], out_fd, err_fd}) ::close(fd);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a pipe would make stdout fully buffered
  g_helper = pid;
  return true;
}

void finish_tagged_output() {
  if (g_helper <= 0) return;
  std::fflush(nullptr);
  const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null_fd >= 0) {
    ::dup2(null_fd, STDOUT_FILENO);  // the pipes' last write ends close: the helper drains them and exits
    ::dup2(null_fd, STDERR_FILENO);
    ::close(null_fd);
  }
  while (::waitpid(g_helper, nullptr, 0) < 0 && errno == EINTR) {
  }
  g_helper = -1;
}

}  // namespace strata::cli
