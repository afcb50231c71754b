// `strata launch --workers N [--chief] [--ps M] [--max-restarts R] [--port-base P] -- COMMAND ARGS...`:
// a local cluster on 127.0.0.1. One process per task (chief:0, worker:0..N-1, ps:0..M-1), each with its
// own TF_CONFIG naming every task's address and its own task, and STRATA_LAUNCH_RESTART (0 on the first
// run, k on the k-th restart). Every line a task writes is copied to the launcher's stdout or stderr with
// the task's prefix ("[worker:1] ..."), whole lines only (a line longer than 64 KiB is cut into pieces).
//
// When a task exits non-zero or is killed by a signal, the launcher says which and how, stops the others
// (SIGTERM to each task's process group, SIGKILL after --stop-timeout seconds), and starts the whole cluster
// again, up to R times; then it exits with that task's status (128 + the signal for a signal). When every
// chief and worker task has exited 0, the ps tasks (servers that never end on their own) are stopped the
// same way and the launcher exits 0.
//
// A cluster with a chief and ps tasks (--chief --ps M) is a parameter-server job: the chief coordinates and the
// workers and ps tasks serve it. There a failed worker or ps task is restarted alone, on its own address, while
// the others go on (each such restart counts against R; STRATA_LAUNCH_RESTART is the task's own count); a failed
// chief stops the cluster as above. The job is done when the chief exits 0: the workers, whose fit the chief ended,
// get until --stop-timeout to exit by themselves (after their last words), then the other tasks are stopped.
// With --min-workers M (elastic synchronous training) every task also gets STRATA_ELASTIC_MIN_WORKERS=M, and a
// failed worker (not the one serving the coordination service) is restarted alone while --max-restarts allows (it
// joins the running job at a step boundary), else left out while M workers still run: the others regroup without
// it and the job goes on.
// SIGINT and SIGTERM sent to the launcher go to every task; the launcher then waits for them as above and exits
// with 128 + that signal (a second one kills the tasks at once).
//
// No process is left behind: each task leads its own process group, which the launcher signals as a whole
// and waits out on every path (success, failure, restart, its own SIGINT/SIGTERM, an error while starting);
// the launcher is a child subreaper, so a task's orphaned children are reaped by it; and each task carries
// PR_SET_PDEATHSIG=SIGKILL, so a launcher killed with SIGKILL takes its tasks with it (their own children,
// out of reach then, are the one exception).
//
// Ports: by default each task's port is found by binding 127.0.0.1:0 (all sockets are held until every
// port is known, then closed just before the tasks start; a process taking one in that instant is the
// only race). With --port-base P the ports are P, P+1, ... in task order, and one already in use is an
// error naming it. A fresh set is picked for each restart (the same P, P+1, ... with --port-base).
//
// Thread-safety: runs on the main thread; installs handlers for SIGINT, SIGTERM, SIGCHLD (and ignores
// SIGPIPE) while it runs, and restores the previous ones.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/error.h"

extern char** environ;

namespace strata::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct LaunchArgs {
  int workers = -1;
  bool chief = false;
  int ps = 0;
  int max_restarts = 0;
  int min_workers = 0;  // 0: not elastic
  int port_base = 0;
  double stop_timeout = 5.0;
  std::vector<std::string> command;
};

constexpr size_t kMaxLine = 64 * 1024;

// "SIGKILL" for 9; "signal 42" when it has no name.
std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// Writes all of `text` to `fd`; a closed reader (EPIPE) drops it.
void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// One line from the launcher itself, on stderr.
void say(const std::string& line) {
  std::fflush(stdout);
  write_all(STDERR_FILENO, "strata launch: " + line + "\n");
}

// ---- signals: handlers write the signal number into a pipe that the event loop polls.

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

class SignalScope {
 public:
  SignalScope() {
    STRATA_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, Error, "launch: pipe2: " << std::strerror(errno));
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (size_t i = 0; i < kHandled.size(); ++i) ::sigaction(kHandled[i], &action, &saved_[i]);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &saved_pipe_);
    sigset_t unblock;
    sigemptyset(&unblock);
    for (const int sig : kHandled) sigaddset(&unblock, sig);
    ::pthread_sigmask(SIG_UNBLOCK, &unblock, &saved_mask_);
  }
  ~SignalScope() {
    for (size_t i = 0; i < kHandled.size(); ++i) ::sigaction(kHandled[i], &saved_[i], nullptr);
    ::sigaction(SIGPIPE, &saved_pipe_, nullptr);
    ::pthread_sigmask(SIG_SETMASK, &saved_mask_, nullptr);
    ::close(g_signal_pipe[0]);
    ::close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  // The signals that arrived since the last call (SIGCHLD included), oldest first.
  static std::vector<int> take() {
    std::vector<int> sigs;
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(g_signal_pipe[0], buf, sizeof buf)) > 0) sigs.insert(sigs.end(), buf, buf + n);
    return sigs;
  }

 private:
  static constexpr std::array<int, 3> kHandled = {SIGINT, SIGTERM, SIGCHLD};
  std::array<struct sigaction, 3> saved_{};
  struct sigaction saved_pipe_ {};
  sigset_t saved_mask_{};
};

// ---- ports

// Binds 127.0.0.1:port (0: any free port) and listens; returns the socket, or -1 with errno set.
int bind_local(int port, bool reuse) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  if (reuse) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 1) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

// One port per task name: free ones picked by the kernel, or base, base+1, ... checked to be free.
std::vector<int> pick_ports(const std::vector<std::string>& names, int port_base) {
  std::vector<int> ports, fds;
  for (size_t i = 0; i < names.size(); ++i) {
    const int want = port_base > 0 ? port_base + static_cast<int>(i) : 0;
    // SO_REUSEADDR for a given port: a socket of a task just stopped, in TIME_WAIT, is no owner.
    const int fd = bind_local(want, port_base > 0);
    if (fd < 0) {
      const int err = errno;
      for (const int f : fds) ::close(f);
      if (port_base > 0 && err == EADDRINUSE) {
        STRATA_THROW(Unavailable, "launch: port " << want << " (for " << names[i]
                                                  << ") is in use on 127.0.0.1; pick another --port-base, or "
                                                     "leave it out to use free ports");
      }
      STRATA_THROW(Unavailable,
                   "launch: cannot bind 127.0.0.1:" << want << " for " << names[i] << ": " << std::strerror(err));
    }
    sockaddr_in addr{};
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ports.push_back(ntohs(addr.sin_port));
    fds.push_back(fd);
  }
  for (const int f : fds) ::close(f);
  return ports;
}

// ---- the command

// The executable for `command`: as given when it has a '/', else the first match on PATH.
std::string find_executable(const std::string& command) {
  const auto runnable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (command.find('/') != std::string::npos) {
    STRATA_CHECK(
        runnable(command), InvalidArgument,
        "launch: cannot run '" << command << "': "
                               << (::access(command.c_str(), F_OK) == 0 ? "not an executable file" : "no such file"));
    return command;
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find(':', start), path.size());
    const std::string dir = end == start ? "." : path.substr(start, end - start);
    const std::string candidate = dir + "/" + command;
    if (runnable(candidate)) return candidate;
    start = end + 1;
  }
  STRATA_THROW(InvalidArgument, "launch: command not found: '" << command << "' (not on PATH)");
}

// ---- tasks

// A pipe from a task: bytes in, whole prefixed lines out to `out_fd`.
struct Stream {
  int fd = -1;
  int out_fd = STDOUT_FILENO;
  std::string partial;

  void emit(const std::string& prefix, const char* data, size_t n) {
    std::string text;
    partial.append(data, n);
    size_t begin = 0;
    for (size_t nl; (nl = partial.find('\n', begin)) != std::string::npos; begin = nl + 1) {
      text += prefix;
      text.append(partial, begin, nl + 1 - begin);
    }
    partial.erase(0, begin);
    while (partial.size() >= kMaxLine) {  // a line without end: cut it
      text += prefix + partial.substr(0, kMaxLine) + "\n";
      partial.erase(0, kMaxLine);
    }
    if (!text.empty()) write_all(out_fd, text);
  }
  // Reads what is there; returns false at end of file (and closes).
  bool pump(const std::string& prefix) {
    char buf[16384];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        emit(prefix, buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      close(prefix);
      return false;
    }
  }
  void close(const std::string& prefix) {
    if (!partial.empty()) write_all(out_fd, prefix + partial + "\n");
    partial.clear();
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct Task {
  std::string type;
  int index = 0;
  std::string name;
  bool dropped = false;  // failed, and the elastic job went on without it
  std::string prefix;    // "[worker:1] "
  pid_t pid = -1;        // also its process group
  bool running = false;
  int status = 0;  // wait status once !running
  Stream out, err;
  std::string tf_config;
  int restarts = 0;  // this task's own restarts (a parameter-server cluster restarts tasks alone)

  bool group_alive() const { return pid > 0 && (::kill(-pid, 0) == 0 || errno == EPERM); }
};

// "exited with status 3" / "was killed by signal 9 (SIGKILL)".
std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + signal_name(WTERMSIG(status)) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }
bool failed(int status) { return WIFSIGNALED(status) || WEXITSTATUS(status) != 0; }

// The environment of a task: ours without another launcher's cluster variables, plus TF_CONFIG.
std::vector<std::string> task_environment(const std::string& tf_config, int attempt, int min_workers) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (name == "TF_CONFIG" || name == "STRATA_LAUNCH_RESTART" || name == "STRATA_ELASTIC_MIN_WORKERS" ||
        name.rfind("OMPI_COMM_WORLD_", 0) == 0 || name == "RANK" || name == "WORLD_SIZE" || name == "LOCAL_RANK" ||
        name == "MASTER_ADDR" || name == "MASTER_PORT") {
      continue;
    }
    env.push_back(entry);
  }
  env.push_back("TF_CONFIG=" + tf_config);
  env.push_back("STRATA_LAUNCH_RESTART=" + std::to_string(attempt));
  if (min_workers > 0) env.push_back("STRATA_ELASTIC_MIN_WORKERS=" + std::to_string(min_workers));
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// How one run of the cluster ended.
struct Outcome {
  int exit_code = 0;         // for the launcher: 0, the failed task's, or 128 + the signal the launcher got
  bool task_failed = false;  // a task failed on its own (restart material)
  int interrupted = 0;       // the signal the launcher got, or 0
};

class Cluster {
 public:
  // `restarts`: the restarts made so far, of the cluster or of single tasks (both count against --max-restarts).
  Cluster(const LaunchArgs& args, const std::string& executable, int attempt, int& restarts)
      : args_(args), executable_(executable), attempt_(attempt), restarts_(restarts) {
    if (args.chief) add("chief", 0);
    for (int i = 0; i < args.workers; ++i) add("worker", i);
    for (int i = 0; i < args.ps; ++i) add("ps", i);
  }
  // Whatever happened, no task outlives this object.
  ~Cluster() {
    for (Task& t : tasks_) {
      if (t.pid > 0 && (t.running || t.group_alive())) ::kill(-t.pid, SIGKILL);
    }
    for (Task& t : tasks_) {
      if (t.pid > 0 && t.running) ::waitpid(t.pid, nullptr, 0);
      t.out.close(t.prefix);
      t.err.close(t.prefix);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (any_group_alive() && Clock::now() < deadline) {  // orphans of the groups: we are their reaper
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      ::usleep(10000);
    }
  }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  Outcome run() {
    start();
    Outcome outcome;
    bool stopping = false;  // the tasks were told to stop (failure, our signal, or the end of the job)
    bool killed = false;
    Clock::time_point deadline{};
    std::optional<Clock::time_point> workers_grace;  // the chief is done: until then the workers may end by themselves
    const auto stop_all = [&](int sig) {
      for (Task& t : tasks_) {
        if (t.running || t.group_alive()) ::kill(-t.pid, sig);
      }
      if (!stopping) deadline = Clock::now() + stop_timeout();
      stopping = true;
    };
    for (;;) {
      // 1. What happened: signals, output, exits.
      std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
      std::vector<Stream*> streams;
      for (Task& t : tasks_) {
        for (Stream* s : {&t.out, &t.err}) {
          if (s->fd >= 0) {
            fds.push_back({s->fd, POLLIN, 0});
            streams.push_back(s);
          }
        }
      }
      int timeout_ms = 100;  // also re-checks process groups that emptied without a SIGCHLD to us
      if (stopping && !killed) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 100));
      }
      const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
      if (ready < 0 && errno != EINTR) STRATA_THROW(Error, "launch: poll: " << std::strerror(errno));
      for (const int sig : SignalScope::take()) {
        if (sig == SIGCHLD) continue;
        if (outcome.interrupted == 0) {
          outcome.interrupted = sig;
          outcome.exit_code = 128 + sig;
          say("got " + signal_name(sig) + "; passing it to every task");
          for (Task& t : tasks_) {
            if (t.running) ::kill(-t.pid, sig);
          }
          if (!stopping) deadline = Clock::now() + stop_timeout();
          stopping = true;
        } else {
          say("got " + signal_name(sig) + " again; killing every task");
          stop_all(SIGKILL);
          killed = true;
        }
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) {
          Task& owner = *owner_of(streams[i - 1]);
          streams[i - 1]->pump(owner.prefix);
        }
      }
      reap();

      // 2. What to do about it.
      if (!stopping && restarts_alone() && chief_done()) {
        // The job is done. The chief has ended every worker's fit, so workers exit by themselves once they have said
        // what they served; ps tasks never do. The workers get until the stop timeout, then everything left stops.
        if (!workers_grace) workers_grace = Clock::now() + stop_timeout();
        const bool workers_left =
            std::any_of(tasks_.begin(), tasks_.end(), [](const Task& t) { return t.running && t.type == "worker"; });
        if (!workers_left || Clock::now() >= *workers_grace) stop_all(SIGTERM);
      } else if (!stopping) {
        for (Task& t : tasks_) {
          if (!t.running && failed(t.status)) {
            if (restarts_alone() && t.type != "chief" && restarts_ < args_.max_restarts) {
              restart_alone(t);
              continue;
            }
            if (t.dropped) continue;
            if (args_.min_workers > 0 && !hosts_service(t) && restarts_ < args_.max_restarts && !job_done()) {
              restart_alone(t);  // it joins the running job at a step boundary
              continue;
            }
            if (goes_on_without(t)) {
              t.dropped = true;
              say(t.name + " " + how_it_ended(t.status) + "; " + std::to_string(workers_running()) +
                  " workers go on without it (elastic, --min-workers " + std::to_string(args_.min_workers) + ")");
              continue;
            }
            say(t.name + " " + how_it_ended(t.status) +
                (args_.min_workers > 0 && t.type != "ps"
                     ? "; " + std::to_string(workers_running()) + " workers remain, fewer than --min-workers " +
                           std::to_string(args_.min_workers) + " or without the one serving the coordination service"
                     : ""));
            outcome.exit_code = exit_code(t.status);
            outcome.task_failed = true;
            break;
          }
        }
        if (outcome.task_failed) {
          say("stopping the other tasks");
          stop_all(SIGTERM);
        } else if (!restarts_alone() && std::none_of(tasks_.begin(), tasks_.end(),
                                                     [](const Task& t) { return t.running && t.type != "ps"; })) {
          stop_all(SIGTERM);  // the job is done: stop the servers (ps) and any child left
        }
      }
      if (stopping && !killed && Clock::now() >= deadline) {
        std::string late;
        for (const Task& t : tasks_) {
          if (t.running || t.group_alive()) late += (late.empty() ? "" : ", ") + t.name;
        }
        if (!late.empty()) {
          say(late + " did not stop within " + format_seconds(args_.stop_timeout) + " s of SIGTERM; sending SIGKILL");
        }
        stop_all(SIGKILL);
        killed = true;
      }
      // 3. Done when every task and every process of its group is gone.
      if (stopping && !any_running() && !any_group_alive()) break;
    }
    for (Task& t : tasks_) {  // what the last processes wrote before their pipes closed
      for (Stream* s : {&t.out, &t.err}) {
        if (s->fd >= 0) s->pump(t.prefix);
        s->close(t.prefix);
      }
    }
    return outcome;
  }

 private:
  void add(const std::string& type, int index) {
    Task t;
    t.type = type;
    t.index = index;
    t.name = type + ":" + std::to_string(index);
    t.prefix = "[" + t.name + "] ";
    t.err.out_fd = STDERR_FILENO;
    tasks_.push_back(std::move(t));
  }

  // A cluster with a chief and ps tasks is a parameter-server job: the chief coordinates, the workers and ps tasks
  // serve it, and a failed worker or ps is restarted alone on its address while the others go on.
  bool restarts_alone() const { return args_.chief && args_.ps > 0; }
  // Elastic training (--min-workers): a failed worker that does not host the coordination service is left out while
  // at least min_workers workers (the chief among them) still run; the others regroup without it.
  bool goes_on_without(const Task& t) const {
    if (args_.min_workers == 0 || hosts_service(t)) return false;
    // Once the task serving the coordination service has ended well, the job is done: a worker failing after it
    // (e.g. one that was evicted and woke late) does not fail the job.
    return job_done() || workers_running() >= args_.min_workers;
  }
  // The task serving the coordination service has ended well.
  bool job_done() const {
    return std::any_of(tasks_.begin(), tasks_.end(),
                       [this](const Task& s) { return hosts_service(s) && !s.running && !failed(s.status); });
  }
  bool hosts_service(const Task& t) const {
    return t.type == "chief" || (!args_.chief && t.type == "worker" && t.index == 0);
  }
  int workers_running() const {
    return static_cast<int>(std::count_if(tasks_.begin(), tasks_.end(), [](const Task& t) {
      return t.running && (t.type == "worker" || t.type == "chief");
    }));
  }
  bool chief_done() const {
    return std::any_of(tasks_.begin(), tasks_.end(),
                       [](const Task& t) { return t.type == "chief" && !t.running && !failed(t.status); });
  }
  void restart_alone(Task& t) {
    ++restarts_;
    ++t.restarts;
    say(t.name + " " + how_it_ended(t.status) + "; restarting it alone on its address (restart " +
        std::to_string(restarts_) + " of " + std::to_string(args_.max_restarts) + "); the other tasks go on");
    if (t.group_alive()) ::kill(-t.pid, SIGKILL);  // what is left of its group goes with it
    for (Stream* s : {&t.out, &t.err}) {
      if (s->fd >= 0) s->pump(t.prefix);
      s->close(t.prefix);
    }
    spawn(t, t.tf_config, t.restarts);
  }

  std::chrono::milliseconds stop_timeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(args_.stop_timeout * 1000));
  }
  static std::string format_seconds(double s) {
    std::string text = std::to_string(s);
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
    return text;
  }

  Task* owner_of(const Stream* s) {
    for (Task& t : tasks_) {
      if (&t.out == s || &t.err == s) return &t;
    }
    return nullptr;
  }
  bool any_running() const {
    return std::any_of(tasks_.begin(), tasks_.end(), [](const Task& t) { return t.running; });
  }
  bool any_group_alive() const {
    return std::any_of(tasks_.begin(), tasks_.end(), [](const Task& t) { return t.group_alive(); });
  }

  // Collects every child that ended: task leaders (their status recorded) and orphans we adopted.
  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (Task& t : tasks_) {
        if (t.pid == pid && t.running) {
          t.running = false;
          t.status = status;
        }
      }
    }
  }

  void start() {
    std::vector<std::string> names;
    for (const Task& t : tasks_) names.push_back(t.name);
    const std::vector<int> ports = pick_ports(names, args_.port_base);
    cluster::ClusterSpec spec;
    for (size_t i = 0; i < tasks_.size(); ++i) {
      spec.jobs[tasks_[i].type].push_back("127.0.0.1:" + std::to_string(ports[i]));
    }
    for (Task& t : tasks_) {
      t.tf_config = cluster::make_tf_config(spec, t.type, t.index);
      spawn(t, t.tf_config, attempt_);
    }
  }

  // Starts task `t`; `restart` is its STRATA_LAUNCH_RESTART.
  void spawn(Task& t, const std::string& tf_config, int restart) {
    std::vector<std::string> env = task_environment(tf_config, restart, args_.min_workers);
    {
      cluster::Environment check;
      for (const auto& e : env) check.emplace(e.substr(0, e.find('=')), e.substr(e.find('=') + 1));
      const cluster::TaskInfo info = cluster::resolve_cluster(check);  // what the task will see
      STRATA_CHECK(info.name() == t.name, Error, "launch: " << t.name << " would resolve as " << info.name());
    }
    std::vector<std::string> argv = args_.command;
    std::vector<char*> c_argv = c_strings(argv);
    std::vector<char*> c_env = c_strings(env);
    int out[2], err[2];
    STRATA_CHECK(::pipe2(out, O_CLOEXEC) == 0, Error, "launch: pipe2: " << std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) {
      ::close(out[0]);
      ::close(out[1]);
      STRATA_THROW(Error, "launch: pipe2: " << std::strerror(errno));
    }
    const pid_t parent = ::getpid();
    const char* path = executable_.c_str();
    // Signals stay blocked from before the fork until the child has reset its handlers: otherwise a SIGTERM the
    // launcher sends a task that has not reached exec yet (a cluster stopping at once) runs the launcher's handler
    // in the child, which writes it into the inherited signal pipe — and the launcher believes it got SIGTERM.
    sigset_t all, before;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &before);
    const pid_t pid = ::fork();
    if (pid == 0) {
      // The child: async-signal-safe calls only until exec.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      for (const int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP, SIGQUIT}) ::sigaction(sig, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve(path, c_argv.data(), c_env.data());
      const char msg[] = "strata launch: exec failed\n";
      [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
      ::_exit(127);
    }
    const int fork_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    ::close(out[1]);
    ::close(err[1]);
    if (pid < 0) {
      ::close(out[0]);
      ::close(err[0]);
      STRATA_THROW(Error, "launch: fork for " << t.name << ": " << std::strerror(fork_errno));
    }
    ::setpgid(pid, pid);  // also here, so that the group exists before we signal it
    t.pid = pid;
    t.running = true;
    t.out.fd = out[0];
    t.err.fd = err[0];
    ::fcntl(out[0], F_SETFL, ::fcntl(out[0], F_GETFL) | O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, ::fcntl(err[0], F_GETFL) | O_NONBLOCK);
  }

  const LaunchArgs& args_;
  std::string executable_;
  int attempt_;
  int& restarts_;
  std::vector<Task> tasks_;
};

void check_args(const LaunchArgs& a) {
  STRATA_CHECK(a.workers >= 0, InvalidArgument, "launch: --workers must be >= 0, got " << a.workers);
  STRATA_CHECK(a.workers + (a.chief ? 1 : 0) >= 1, InvalidArgument,
               "launch: the cluster needs a chief or a worker (--workers 0 wants --chief)");
  STRATA_CHECK(a.ps >= 0, InvalidArgument, "launch: --ps must be >= 0, got " << a.ps);
  STRATA_CHECK(a.max_restarts >= 0, InvalidArgument, "launch: --max-restarts must be >= 0, got " << a.max_restarts);
  const int tasks = a.workers + (a.chief ? 1 : 0) + a.ps;
  STRATA_CHECK(a.port_base == 0 || (a.port_base >= 1 && a.port_base + tasks - 1 <= 65535), InvalidArgument,
               "launch: --port-base must leave room for " << tasks << " ports in 1..65535, got " << a.port_base);
  STRATA_CHECK(a.stop_timeout >= 0 && a.stop_timeout <= 3600, InvalidArgument,
               "launch: --stop-timeout must be 0..3600 seconds, got " << a.stop_timeout);
  STRATA_CHECK(!a.command.empty(), InvalidArgument, "launch: no command (put it after --)");
  const int workers = a.workers + (a.chief ? 1 : 0);
  STRATA_CHECK(a.min_workers >= 0 && a.min_workers <= workers, InvalidArgument,
               "launch: --min-workers must be 0..(the " << workers << " workers), got " << a.min_workers);
  STRATA_CHECK(a.min_workers == 0 || a.ps == 0, InvalidArgument,
               "launch: --min-workers is for synchronous jobs (multi_worker_mirrored); a parameter-server job "
               "restarts its tasks alone with --max-restarts");
}

// Runs the cluster, restarting it after a task's failure; returns the launcher's exit status.
int run_launch(const LaunchArgs& a) {
  check_args(a);
  const std::string executable = find_executable(a.command.front());
  SignalScope signals;
  // Orphans of a task's group are re-parented to us, so they are ours to reap (and to wait out).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  Outcome outcome;
  int restarts = 0;
  for (int attempt = 0;; ++attempt) {
    {
      Cluster cluster(a, executable, attempt, restarts);
      outcome = cluster.run();
    }
    if (!outcome.task_failed || outcome.interrupted != 0) break;
    if (restarts >= a.max_restarts) {
      if (a.max_restarts > 0) {
        say("giving up after " + std::to_string(a.max_restarts) + " restart" + (a.max_restarts == 1 ? "" : "s"));
      }
      break;
    }
    // A signal that came while the cluster was being stopped ends the job here.
    for (const int sig : SignalScope::take()) {
      if (sig != SIGCHLD && outcome.interrupted == 0) outcome.interrupted = sig;
    }
    if (outcome.interrupted != 0) {
      say("got " + signal_name(outcome.interrupted) + "; not restarting");
      outcome.exit_code = 128 + outcome.interrupted;
      break;
    }
    ++restarts;
    say("restart " + std::to_string(restarts) + " of " + std::to_string(a.max_restarts));
  }
  return outcome.exit_code;
}

}  // namespace

void add_launch_command(CLI::App& app) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* launch = app.add_subcommand(
      "launch",
      "Start a local cluster on 127.0.0.1: one process per task running COMMAND, each with its TF_CONFIG (every "
      "task's address, and its own task) and STRATA_LAUNCH_RESTART (the restart number, 0 first). Output lines are "
      "prefixed with the task ([worker:1] ...). When a task exits non-zero or by a signal, the others are stopped "
      "(SIGTERM, then SIGKILL after --stop-timeout) and the cluster starts again, up to --max-restarts times; the "
      "launcher then exits with that task's status (128 + signal). With --chief and --ps (a parameter-server job) a "
      "failed worker or ps is restarted alone while the others go on, and the job ends when the chief exits 0; so "
      "is a failed worker with --min-workers (elastic training). SIGINT/SIGTERM are passed to every task. "
      "Example: strata launch --workers 2 -- strata train job.yaml --strategy multi_worker_mirrored");
  launch->add_option("--workers", args->workers, "Worker tasks (worker:0 .. worker:N-1)")->required();
  launch->add_flag("--chief", args->chief, "Add a chief task (chief:0); without one, worker:0 is the chief");
  launch->add_option("--ps", args->ps, "Parameter-server tasks (ps:0 .. ps:M-1)")->capture_default_str();
  launch
      ->add_option("--max-restarts", args->max_restarts,
                   "Restarts after a task fails: of the whole cluster, or of the failed worker or ps alone with "
                   "--chief and --ps")
      ->capture_default_str();
  launch
      ->add_option("--min-workers", args->min_workers,
                   "Elastic training: when a worker fails the others go on without it while at least this many "
                   "workers remain, and within --max-restarts it is restarted alone and rejoins at a step boundary; "
                   "the tasks see it as STRATA_ELASTIC_MIN_WORKERS (0: not elastic)")
      ->capture_default_str();
  launch->add_option("--port-base", args->port_base,
                     "Ports P, P+1, ... in task order (chief, workers, ps); default: free ports picked by the system");
  launch->add_option("--stop-timeout", args->stop_timeout, "Seconds between SIGTERM and SIGKILL when stopping tasks")
      ->capture_default_str();
  launch->add_option("command", args->command, "COMMAND ARGS... (after --)")->required();
  launch->callback([args] {
    const int code = run_launch(*args);
    std::fflush(stdout);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace strata::cli
