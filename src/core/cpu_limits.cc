// Reading the cores a process may run on: affinity, cgroup quota and cpuset (see cpu_limits.h).
// Thread-safety: the parsers are pure; read_cpu_limits only reads files.
#include "core/cpu_limits.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

namespace strata::detail {
namespace {

std::optional<long long> parse_integer(const std::string& text) {
  long long v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// The first line of `path`, trimmed; nullopt when it cannot be read.
std::optional<std::string> read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return trim(line);
}

// This process's cgroup v2 path ("/user.slice/..."), from the "0::" line of /proc/self/cgroup.
std::optional<std::string> cgroup_v2_path() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return std::nullopt;
}

// The tightest quota of the cgroup and its ancestors (cgroup v2), else the v1 cpu controller's.
std::optional<double> read_quota() {
  std::optional<double> tightest;
  const auto tighten = [&](std::optional<double> q) {
    if (q && (!tightest || *q < *tightest)) tightest = q;
  };
  if (const auto path = cgroup_v2_path()) {
    std::string dir = "/sys/fs/cgroup" + (*path == "/" ? std::string() : *path);
    for (;;) {
      if (const auto text = read_line(dir + "/cpu.max")) tighten(parse_cpu_max(*text));
      if (dir == "/sys/fs/cgroup") break;
      dir = dir.substr(0, dir.rfind('/'));
    }
  }
  for (const char* v1 : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"}) {
    const auto quota = read_line(std::string(v1) + "/cpu.cfs_quota_us");
    const auto period = read_line(std::string(v1) + "/cpu.cfs_period_us");
    if (quota && period) tighten(parse_cfs_quota(*quota, *period));
  }
  return tightest;
}

int read_cpuset() {
  if (const auto path = cgroup_v2_path()) {
    const std::string dir = "/sys/fs/cgroup" + (*path == "/" ? std::string() : *path);
    if (const auto list = read_line(dir + "/cpuset.cpus.effective")) {
      if (const auto n = count_cpu_list(*list); n && *n > 0) return *n;
    }
  }
  if (const auto list = read_line("/sys/devices/system/cpu/online")) {
    if (const auto n = count_cpu_list(*list); n && *n > 0) return *n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

std::optional<int> count_cpu_list(const std::string& list) {
  const std::string text = trim(list);
  if (text.empty()) return 0;
  int count = 0;
  std::stringstream in(text);
  for (std::string range; std::getline(in, range, ',');) {
    const size_t dash = range.find('-');
    const auto lo = parse_integer(range.substr(0, dash));
    const auto hi = dash == std::string::npos ? lo : parse_integer(range.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi - *lo >= (1 << 20)) return std::nullopt;
    count += static_cast<int>(*hi - *lo + 1);
  }
  return count;
}

std::optional<double> parse_cpu_max(const std::string& text) {
  std::istringstream in(text);
  std::string quota, period;
  if (!(in >> quota >> period) || quota == "max") return std::nullopt;
  const auto q = parse_integer(quota), p = parse_integer(period);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return static_cast<double>(*q) / static_cast<double>(*p);
}

std::optional<double> parse_cfs_quota(const std::string& quota_us, const std::string& period_us) {
  const auto q = parse_integer(trim(quota_us)), p = parse_integer(trim(period_us));
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return static_cast<double>(*q) / static_cast<double>(*p);
}

CpuLimits read_cpu_limits() {
  CpuLimits limits;
  cpu_set_t set;
  CPU_ZERO(&set);
  limits.cpuset = read_cpuset();
  limits.affinity = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : limits.cpuset;
  limits.affinity = std::max(1, limits.affinity);
  limits.quota = read_quota();
  return limits;
}

int usable_cores(const CpuLimits& limits) {
  int cores = std::max(1, limits.affinity);
  if (limits.quota) cores = std::min(cores, std::max(1, static_cast<int>(std::ceil(*limits.quota - 1e-9))));
  return cores;
}

}  // namespace strata::detail
