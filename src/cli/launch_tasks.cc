// The task machinery of `strata launch` (see launch_tasks.h; the policies are described in launch_command.cc).
//
// No process is left behind: each task leads its own process group, which the loop signals as a whole and waits
// out on every path (success, failure, restart, the launcher's own SIGINT/SIGTERM, an error while starting); the
// launcher is a child subreaper (launch_command.cc sets it), so a task's orphaned children are reaped here; and
// each task carries PR_SET_PDEATHSIG=SIGKILL, so a launcher killed with SIGKILL takes its tasks with it (their own
// children, out of reach then, are the one exception).
//
// Thread-safety: main thread only. The signal handler writes into a pipe (async-signal-safe); a forked child makes
// async-signal-safe calls only until exec.
#include "cli/launch_tasks.h"

#include "cli/prefixed_lines.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "strata/error.h"

extern char** environ;

namespace strata::cli::launch {

using Clock = std::chrono::steady_clock;

namespace {

// ---- signals: handlers write the signal number into a pipe that the event loop polls.

int g_signal_pipe[2] = {-1, -1};
constexpr std::array<int, 3> kHandled = {SIGINT, SIGTERM, SIGCHLD};
std::array<struct sigaction, 3> g_saved{};
struct sigaction g_saved_pipe {};
sigset_t g_saved_mask{};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

// Binds host:port (0: any free port) and listens; returns the socket, or -1 with errno set (EADDRNOTAVAIL for
// a host that is not this machine's; for a name that does not resolve, too).
int bind_listen(const std::string& host, int port, bool reuse) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) {
    errno = EADDRNOTAVAIL;
    return -1;
  }
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int saved = errno;
    ::freeaddrinfo(found);
    errno = saved;
    return -1;
  }
  const int one = 1;
  if (reuse) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool ok = ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 1) == 0;
  const int saved = errno;
  ::freeaddrinfo(found);
  if (!ok) {
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

}  // namespace

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

void say(const std::string& line) {
  std::fflush(stdout);
  write_all(STDERR_FILENO, "strata launch: " + line + "\n");
}

std::string format_seconds(double s) {
  std::string text = std::to_string(s);
  text.erase(text.find_last_not_of('0') + 1);
  if (text.back() == '.') text.pop_back();
  return text;
}

SignalScope::SignalScope() {
  STRATA_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, Error, "launch: pipe2: " << std::strerror(errno));
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (size_t i = 0; i < kHandled.size(); ++i) ::sigaction(kHandled[i], &action, &g_saved[i]);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &g_saved_pipe);
  sigset_t unblock;
  sigemptyset(&unblock);
  for (const int sig : kHandled) sigaddset(&unblock, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &unblock, &g_saved_mask);
}

SignalScope::~SignalScope() {
  for (size_t i = 0; i < kHandled.size(); ++i) ::sigaction(kHandled[i], &g_saved[i], nullptr);
  ::sigaction(SIGPIPE, &g_saved_pipe, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &g_saved_mask, nullptr);
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
}

std::vector<int> SignalScope::take() {
  std::vector<int> sigs;
  unsigned char buf[64];
  ssize_t n;
  while ((n = ::read(g_signal_pipe[0], buf, sizeof buf)) > 0) sigs.insert(sigs.end(), buf, buf + n);
  return sigs;
}

int SignalScope::take_interrupt() {
  for (const int sig : take()) {
    if (sig != SIGCHLD) return sig;
  }
  return 0;
}

int SignalScope::fd() { return g_signal_pipe[0]; }

PortReservation::PortReservation(const std::string& host, const std::vector<std::string>& names, int port_base) {
  for (size_t i = 0; i < names.size(); ++i) {
    const int want = port_base > 0 ? port_base + static_cast<int>(i) : 0;
    // SO_REUSEADDR for a given port: a socket of a task just stopped, in TIME_WAIT, is no owner.
    const int fd = bind_listen(host, want, port_base > 0);
    if (fd < 0) {
      const int err = errno;
      release();
      if (port_base > 0 && err == EADDRINUSE) {
        STRATA_THROW(Unavailable, "launch: port " << want << " (for " << names[i] << ") is in use on " << host
                                                  << "; pick another --port-base, or leave it out to use free ports");
      }
      STRATA_THROW(Unavailable, "launch: cannot bind "
                                    << host_port(host, want) << " for " << names[i] << ": " << std::strerror(err)
                                    << (err == EADDRNOTAVAIL ? " (is it an address of this machine?)" : ""));
    }
    ports_.push_back(bound_port(fd));
    fds_.push_back(fd);
  }
}

void PortReservation::release() {
  for (const int f : fds_) ::close(f);
  fds_.clear();
}

std::string host_port(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

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

namespace {

// Whether a variable of the launcher's environment names a cluster of another launcher (or another run of
// this one): TF_CONFIG and ours, mpirun's, torchrun's, and SLURM's per-task and per-step variables (a launch
// started inside an sbatch allocation or an srun step gives its tasks only TF_CONFIG; the job's own
// SLURM_JOB_* stay).
bool is_cluster_variable(const std::string& name) {
  static const char* const kNames[] = {
      "TF_CONFIG", "STRATA_LAUNCH_RESTART", "STRATA_ELASTIC_MIN_WORKERS", "STRATA_SLURM_JOBS",
      // torchrun
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
      "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
      // SLURM: the task's place in its step
      "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE",
      "SLURM_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURM_GTIDS", "SLURM_TASK_PID"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return name.rfind("OMPI_COMM_WORLD_", 0) == 0 || name.rfind("SLURM_STEP_", 0) == 0 ||
         name.rfind("SLURM_SRUN_COMM_", 0) == 0;
}

}  // namespace

std::vector<std::string> task_environment(const std::string& tf_config, int attempt, int min_workers) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    if (is_cluster_variable(entry.substr(0, entry.find('=')))) continue;
    env.push_back(entry);
  }
  env.push_back("TF_CONFIG=" + tf_config);
  env.push_back("STRATA_LAUNCH_RESTART=" + std::to_string(attempt));
  if (min_workers > 0) env.push_back("STRATA_ELASTIC_MIN_WORKERS=" + std::to_string(min_workers));
  return env;
}

namespace {

// A pipe from a task: bytes in, whole prefixed lines out to `out_fd`.
struct Stream {
  int fd = -1;
  int out_fd = STDOUT_FILENO;
  PrefixedLines lines;

  void emit(const std::string& prefix, const char* data, size_t n) { write_all(out_fd, lines.feed(prefix, data, n)); }
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
    write_all(out_fd, lines.rest(prefix));
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
  bool hosts_coordinator = false;  // it serves the coordination service (as cluster resolution says of its TF_CONFIG)
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

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

class Cluster {
 public:
  // `restarts`: the restarts made so far, of the cluster or of single tasks (both count against --max-restarts).
  Cluster(const TaskOptions& args, const std::string& executable, const std::vector<TaskId>& tasks, int attempt,
          int& restarts, Peers* peers)
      : args_(args), executable_(executable), attempt_(attempt), restarts_(restarts), peers_(peers) {
    for (const TaskId& id : tasks) add(id.type, id.index);
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

  Outcome run(const cluster::ClusterSpec& spec) {
    start(spec);
    Outcome outcome;
    bool published_done = false, published_chief = false;
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
      std::vector<pollfd> fds{{SignalScope::fd(), POLLIN, 0}};
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
          if (peers_ != nullptr) peers_->publish_stop("its launcher got " + signal_name(sig), 128 + sig, false);
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
      if (peers_ != nullptr && !published_chief && chief_done()) {
        peers_->publish_chief_done();
        published_chief = true;
      }
      if (!stopping && restarts_alone() && (chief_done() || (peers_ != nullptr && peers_->chief_done()))) {
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
              say(t.name + " " + how_it_ended(t.status) + "; " +
                  (workers_running() == 1 ? std::string("1 worker goes on")
                                          : std::to_string(workers_running()) + " workers go on") +
                  " without it (elastic, --min-workers " + std::to_string(args_.min_workers) + ")");
              continue;
            }
            say(t.name + " " + how_it_ended(t.status) +
                (args_.min_workers > 0 && t.type != "ps"
                     ? "; " +
                           (workers_running() == 1 ? std::string("1 worker remains")
                                                   : std::to_string(workers_running()) + " workers remain") +
                           ", fewer than --min-workers " +
                           std::to_string(args_.min_workers) + " or without the one serving the coordination service"
                     : ""));
            outcome.exit_code = exit_code(t.status);
            outcome.task_failed = true;
            if (peers_ != nullptr) peers_->publish_stop(t.name + " " + how_it_ended(t.status), outcome.exit_code, true);
            break;
          }
        }
        if (outcome.task_failed) {
          say("stopping the other tasks");
          stop_all(SIGTERM);
        } else if (!restarts_alone() && std::none_of(tasks_.begin(), tasks_.end(),
                                                     [](const Task& t) { return t.running && t.type != "ps"; })) {
          // This node's part of the job is done; the job is when every node's is: stop the servers (ps) and any
          // child left.
          if (peers_ != nullptr && !published_done) {
            peers_->publish_workers_done();
            published_done = true;
          }
          if (peers_ == nullptr || peers_->all_workers_done()) stop_all(SIGTERM);
        }
      }
      if (!stopping && peers_ != nullptr) {  // another node's task failed, its launcher got a signal, or it is gone
        if (const std::optional<Peers::Stop> stop = peers_->stop()) {
          say(stop->why + "; stopping this node's tasks");
          outcome.exit_code = stop->exit_code;
          outcome.task_failed = stop->restartable && !stop->node_lost;
          if (stop->node_lost) outcome.node_lost = stop->why;
          stop_all(SIGTERM);
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
  static bool hosts_service(const Task& t) { return t.hosts_coordinator; }
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

  void start(const cluster::ClusterSpec& spec) {
    for (Task& t : tasks_) {
      t.tf_config = cluster::make_tf_config(spec, t.type, t.index);
      t.hosts_coordinator = cluster::resolve_tf_config(t.tf_config).hosts_coordinator;
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

  const TaskOptions& args_;
  std::string executable_;
  int attempt_;
  int& restarts_;
  Peers* peers_;
  std::vector<Task> tasks_;
};

}  // namespace

Outcome run_tasks(const TaskOptions& options, const std::string& executable, const std::vector<TaskId>& tasks,
                  const cluster::ClusterSpec& spec, int attempt, int& restarts, Peers* peers) {
  Cluster cluster(options, executable, tasks, attempt, restarts, peers);
  return cluster.run(spec);
}

}  // namespace strata::cli::launch
