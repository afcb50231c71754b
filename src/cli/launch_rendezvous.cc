// The multi-node rendezvous of `strata launch` (see launch_rendezvous.h for the protocol).
//
// Thread-safety: the public functions run on the launcher's main thread; watch() on the watcher thread and
// on_lost() on the coordination client's heartbeat thread. They share the state guarded by mu_; RPCs are
// made outside the lock (the client is thread-safe).
#include "cli/launch_rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <sstream>

#include "strata/error.h"

namespace strata::cli::launch {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kPollInterval{100};  // how often the watcher reads the round's keys
constexpr milliseconds kRpcTimeout{1000};   // a launcher's RPC that does not wait (and a heartbeat's deadline)
constexpr milliseconds kJoinSlice{250};     // a wait for the nodes' announcements, between looks at signals

std::string seconds_text(milliseconds d) { return format_seconds(static_cast<double>(d.count()) / 1000.0); }

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  }
  return out;
}

// "<host> <port>,<port>,..." and back.
std::string format_node(const std::string& host, const std::vector<int>& ports) {
  std::string text = host + " ";
  for (size_t i = 0; i < ports.size(); ++i) text += (i == 0 ? "" : ",") + std::to_string(ports[i]);
  return text;
}

std::optional<NodeAddress> parse_node(const std::string& text) {
  const size_t space = text.find(' ');
  if (space == std::string::npos || space == 0) return std::nullopt;
  NodeAddress node{text.substr(0, space), {}};
  std::string_view rest(text);
  rest.remove_prefix(space + 1);
  while (!rest.empty()) {
    const size_t comma = std::min(rest.find(','), rest.size());
    int port = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + comma, port);
    if (ec != std::errc() || end != rest.data() + comma || port < 1 || port > 65535) return std::nullopt;
    node.ports.push_back(port);
    rest.remove_prefix(std::min(comma + 1, rest.size()));
  }
  return node;
}

// The round's stop record: "<rank>\n<exit code>\n<1: restartable>\n<why>".
std::string format_stop(int rank, const Peers::Stop& stop) {
  return std::to_string(rank) + "\n" + std::to_string(stop.exit_code) + "\n" + (stop.restartable ? "1" : "0") + "\n" +
         stop.why;
}

std::optional<std::pair<int, Peers::Stop>> parse_stop(const std::string& text) {
  std::istringstream in(text);
  std::string rank, code, restartable, why;
  if (!std::getline(in, rank) || !std::getline(in, code) || !std::getline(in, restartable)) return std::nullopt;
  std::getline(in, why, '\0');
  Peers::Stop stop;
  stop.why = why;
  stop.restartable = restartable == "1";
  int r = 0;
  if (std::from_chars(rank.data(), rank.data() + rank.size(), r).ec != std::errc() ||
      std::from_chars(code.data(), code.data() + code.size(), stop.exit_code).ec != std::errc()) {
    return std::nullopt;
  }
  return std::pair{r, stop};
}

}  // namespace

std::vector<TaskId> node_tasks(const NodeLayout& layout, int node) {
  std::vector<TaskId> tasks;
  if (layout.chief && node == 0) tasks.push_back({"chief", 0});
  for (int i = 0; i < layout.workers_per_node; ++i) tasks.push_back({"worker", node * layout.workers_per_node + i});
  for (int i = node; i < layout.ps; i += layout.nnodes) tasks.push_back({"ps", i});
  return tasks;
}

cluster::ClusterSpec layout_cluster(const NodeLayout& layout, const std::vector<NodeAddress>& nodes) {
  STRATA_CHECK(static_cast<int>(nodes.size()) == layout.nnodes, InvalidArgument,
               "launch: " << nodes.size() << " node addresses for " << layout.nnodes << " nodes");
  std::map<std::string, std::map<int, std::string>> by_type;
  for (int n = 0; n < layout.nnodes; ++n) {
    const std::vector<TaskId> tasks = node_tasks(layout, n);
    STRATA_CHECK(tasks.size() == nodes[n].ports.size(), InvalidArgument,
                 "launch: node " << n << " announced " << nodes[n].ports.size() << " ports for its " << tasks.size()
                                 << " tasks");
    for (size_t i = 0; i < tasks.size(); ++i) {
      by_type[tasks[i].type][tasks[i].index] = host_port(nodes[n].host, nodes[n].ports[i]);
    }
  }
  cluster::ClusterSpec spec;
  for (auto& [type, addresses] : by_type) {
    for (auto& [index, address] : addresses) spec.jobs[type].push_back(std::move(address));
  }
  return spec;
}

std::string route_address(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  STRATA_CHECK(rc == 0 && found != nullptr, InvalidArgument,
               "launch: --master-addr '" << host << "' does not resolve: " << ::gai_strerror(rc));
  const int fd = ::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  // connect() on a UDP socket only chooses the route (and so the source address); it sends nothing.
  const bool routed = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  const int err = errno;
  ::freeaddrinfo(found);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  const bool named = routed && ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  if (fd >= 0) ::close(fd);
  STRATA_CHECK(named, Unavailable,
               "launch: no route from this machine to the master " << host_port(host, port) << " ("
                                                                   << std::strerror(err)
                                                                   << "); give this node's address with --node-addr");
  char text[INET6_ADDRSTRLEN] = {};
  if (local.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&local);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return "127.0.0.1";
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
  } else {
    const auto* in4 = reinterpret_cast<const sockaddr_in*>(&local);
    if ((ntohl(in4->sin_addr.s_addr) >> 24) == 127) return "127.0.0.1";
    ::inet_ntop(AF_INET, &in4->sin_addr, text, sizeof text);
  }
  return text;
}

Rendezvous::Rendezvous(Options options) : options_(std::move(options)) {
  hosts_.resize(static_cast<size_t>(options_.layout.nnodes));
  if (options_.node_rank != 0) return;
  std::vector<std::string> nodes;
  for (int n = 0; n < options_.layout.nnodes; ++n) nodes.push_back("node:" + std::to_string(n));
  service_ = std::make_unique<cluster::CoordinationService>();
  try {
    service_->start(master(), {.heartbeat_timeout = options_.node_timeout, .tasks = nodes});
  } catch (const Error& e) {
    STRATA_THROW(Unavailable, "launch: node 0 serves the rendezvous on " << master()
                                                                         << " (--master-addr, --master-port), but "
                                                                            "cannot listen there: "
                                                                         << e.what());
  }
}

Rendezvous::~Rendezvous() {
  stop_watcher();
  if (client_) client_->stop_heartbeats();
  if (service_) service_->stop();
}

std::string Rendezvous::master() const { return host_port(options_.master_addr, options_.master_port); }

std::string Rendezvous::node_name(int rank) const {
  std::string text = "node " + std::to_string(rank) + " of " + std::to_string(options_.layout.nnodes);
  if (rank >= 0 && rank < static_cast<int>(hosts_.size()) && !hosts_[rank].empty()) text += " (" + hosts_[rank] + ")";
  return text;
}

std::string Rendezvous::key(const std::string& name) const { return "launch/r" + std::to_string(round_) + "/" + name; }

bool Rendezvous::connect(Clock::time_point deadline, int* interrupt) {
  const std::string me = "node:" + std::to_string(options_.node_rank);
  for (;;) {
    if ((*interrupt = SignalScope::take_interrupt()) != 0) return false;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    try {
      client_ = std::make_unique<cluster::CoordinationClient>(
          master(), me,
          cluster::CoordinationClient::Options{.connect_timeout = std::clamp(left, milliseconds(1), milliseconds(500)),
                                               .rpc_timeout = kRpcTimeout,
                                               .store_timeout = milliseconds(5000),
                                               .service_timeout = options_.node_timeout});
      break;
    } catch (const Unavailable&) {
      STRATA_CHECK(Clock::now() < deadline, Timeout,
                   "launch: node 0 of " << options_.layout.nnodes << " did not join the rendezvous at " << master()
                                        << " within " << seconds_text(options_.rdzv_timeout)
                                        << " s (--rdzv-timeout): nothing answered there, and node 0's launcher "
                                           "serves it");
    }
  }
  // Every node must lay the job out alike: the first node's flags are the job's.
  const std::string flags = client_->compare_set("launch/flags", "", options_.flags);
  STRATA_CHECK(flags == options_.flags, InvalidArgument,
               "launch: node " << options_.node_rank << " was started with " << options_.flags
                               << ", but the rendezvous at " << master() << " holds a job of " << flags
                               << "; every node needs the same --nnodes, --workers-per-node, --chief, --ps and "
                                  "--max-restarts");
  const int64_t claims = client_->add("launch/claim/" + std::to_string(options_.node_rank), 1);
  STRATA_CHECK(claims == 1, InvalidArgument,
               "launch: node rank " << options_.node_rank << " is taken: another launcher joined the rendezvous at "
                                    << master() << " as node " << options_.node_rank
                                    << " (each node needs its own --node-rank 0.." << options_.layout.nnodes - 1
                                    << ")");
  client_->set_on_lost([this](const cluster::LostTask& lost) { on_lost(lost); });
  client_->start_heartbeats(std::clamp<milliseconds>(options_.node_timeout / 5, milliseconds(100), milliseconds(1000)));
  watcher_ = std::thread([this] { watch(); });
  return true;
}

void Rendezvous::on_lost(const cluster::LostTask& lost) {
  std::lock_guard lock(mu_);
  if (lost.task.rfind("node:", 0) == 0) {
    int rank = -1;
    std::from_chars(lost.task.data() + 5, lost.task.data() + lost.task.size(), rank);
    lost_.push_back(node_name(rank) + " was lost: " + lost.reason);
  } else {  // the service itself: node 0's launcher or the network to it
    master_gone_ = true;
    lost_.push_back("node 0 of " + std::to_string(options_.layout.nnodes) + " (the master, serving the rendezvous at " +
                    master() + ") is gone: " + lost.reason);
  }
}

// Unavailable when a node was lost, or left the job (so that round `round` cannot gather every node). A service
// that does not answer is no news here: the heartbeats tell whether node 0 is gone.
void Rendezvous::check_not_lost_or_left(int round) {
  {
    std::lock_guard lock(mu_);
    STRATA_CHECK(lost_.empty(), Unavailable,
                 "launch: " << lost_.front() << " (while waiting for every node to join round " << round << ")");
  }
  int left_node = -1;
  std::string how;
  try {
    if (client_->num_keys_with_prefix("launch/left/") == 0) return;
    for (int n = 0; n < options_.layout.nnodes && left_node < 0; ++n) {
      const std::string left = "launch/left/" + std::to_string(n);
      if (n != options_.node_rank && client_->check({left})) {
        left_node = n;
        how = client_->get(left);
      }
    }
  } catch (const Error&) {
    return;
  }
  if (left_node < 0) return;
  std::lock_guard lock(mu_);
  STRATA_THROW(Unavailable, "launch: " << node_name(left_node) << " left the job (" << how
                                       << "), so the cluster cannot start again");
}

std::optional<cluster::ClusterSpec> Rendezvous::join(int round, const std::vector<int>& ports, int* interrupt) {
  *interrupt = 0;
  const auto deadline = Clock::now() + options_.rdzv_timeout;
  if (!client_) {
    if (!connect(deadline, interrupt)) return std::nullopt;
    say("node " + std::to_string(options_.node_rank) + " of " + std::to_string(options_.layout.nnodes) + " at " +
        options_.node_addr + " joined the rendezvous at " + master() + "; waiting for every node (--rdzv-timeout " +
        seconds_text(options_.rdzv_timeout) + " s)");
  }
  const std::string prefix = "launch/r" + std::to_string(round) + "/node/";
  std::vector<std::string> keys;
  for (int n = 0; n < options_.layout.nnodes; ++n) keys.push_back(prefix + std::to_string(n));
  bool announced = false;
  // The nodes seen to have announced themselves: those still missing when the service stops answering (node 0
  // gave up first) are the ones named.
  std::vector<bool> seen(keys.size(), false);
  seen[options_.node_rank] = true;
  for (;;) {
    if ((*interrupt = SignalScope::take_interrupt()) != 0) return std::nullopt;
    check_not_lost_or_left(round);
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    std::vector<std::string> missing_keys;
    for (size_t n = 0; n < keys.size(); ++n) {
      if (!seen[n]) missing_keys.push_back(keys[n]);
    }
    try {
      if (!announced) client_->set(keys[options_.node_rank], format_node(options_.node_addr, ports));
      announced = true;
      if (!missing_keys.empty()) client_->wait(missing_keys, std::clamp(left, milliseconds(1), kJoinSlice));
      break;
    } catch (const Timeout&) {
      try {
        for (size_t n = 0; n < keys.size(); ++n) seen[n] = seen[n] || client_->check({keys[n]});
      } catch (const Error&) {
      }
    } catch (const Unavailable&) {
      ::usleep(100000);  // the service did not answer: node 0 may be gone (the heartbeats will tell)
    }
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (size_t n = 0; n < keys.size(); ++n) {
        if (!seen[n]) missing.push_back(static_cast<int>(n));
      }
      STRATA_THROW(Timeout, "launch: node" << (missing.size() == 1 ? " " : "s ") << join_ranks(missing) << " of "
                                           << options_.layout.nnodes << " did not join the rendezvous at " << master()
                                           << " within " << seconds_text(options_.rdzv_timeout) << " s"
                                           << (round > 0 ? " for restart " + std::to_string(round) : std::string())
                                           << (announced ? "" : " (nor could this node announce itself)")
                                           << " (--rdzv-timeout)");
    }
  }
  std::vector<NodeAddress> nodes;
  for (int n = 0; n < options_.layout.nnodes; ++n) {
    const std::string text = client_->get(keys[n]);
    std::optional<NodeAddress> node = parse_node(text);
    STRATA_CHECK(
        node.has_value(), DataCorrupt,
        "launch: node " << n << "'s announcement '" << text << "' at " << master() << " is not '<address> <ports>'");
    nodes.push_back(std::move(*node));
  }
  cluster::ClusterSpec spec = layout_cluster(options_.layout, nodes);
  std::lock_guard lock(mu_);
  for (int n = 0; n < options_.layout.nnodes; ++n) hosts_[n] = nodes[n].host;
  round_ = round;
  remote_stop_.reset();
  nodes_done_ = 0;
  chief_done_ = false;
  return spec;
}

std::optional<Peers::Stop> Rendezvous::stop() {
  std::lock_guard lock(mu_);
  if (!lost_.empty()) return Stop{.why = lost_.front(), .exit_code = 1, .restartable = false, .node_lost = true};
  return remote_stop_;
}

void Rendezvous::publish_stop(const std::string& why, int exit_code, bool restartable) {
  std::lock_guard lock(mu_);
  const Stop stop{.why = "node " + std::to_string(options_.node_rank) + ": " + why,
                  .exit_code = exit_code,
                  .restartable = restartable,
                  .node_lost = false};
  publish_.push_back({key("stop"), format_stop(options_.node_rank, stop), true});
  cv_.notify_all();
}

void Rendezvous::publish_workers_done() {
  std::lock_guard lock(mu_);
  publish_.push_back({key("done/" + std::to_string(options_.node_rank)), "1", false});
  cv_.notify_all();
}

bool Rendezvous::all_workers_done() {
  std::lock_guard lock(mu_);
  return nodes_done_ >= options_.layout.nnodes;
}

void Rendezvous::publish_chief_done() {
  std::lock_guard lock(mu_);
  publish_.push_back({key("chief_done"), "1", false});
  cv_.notify_all();
}

bool Rendezvous::chief_done() {
  std::lock_guard lock(mu_);
  return chief_done_;
}

void Rendezvous::watch() {
  std::unique_lock lock(mu_);
  bool backoff = false;  // the last RPC failed: wait a poll interval before trying again
  for (;;) {
    cv_.wait_for(lock, kPollInterval, [this, backoff] { return quit_ || (!backoff && !publish_.empty()); });
    if (master_gone_) publish_.clear();  // no one to tell
    const bool last = quit_;             // one more try at what is to publish, then stop
    if (last && publish_.empty()) return;
    std::deque<Publish> out;
    out.swap(publish_);
    const int round = round_;
    const bool stop_known = remote_stop_.has_value();
    lock.unlock();
    // After an RPC that failed (the service did not answer: the heartbeats tell whether node 0 is gone), the rest
    // waits for the next try, so that stopping this thread waits for one RPC (kRpcTimeout) at most.
    size_t sent = 0;
    for (; sent < out.size(); ++sent) {
      try {
        if (out[sent].first_wins) {
          client_->compare_set(out[sent].key, "", out[sent].value);
        } else {
          client_->set(out[sent].key, out[sent].value);
        }
      } catch (const Error&) {
        break;
      }
    }
    const bool failing = sent < out.size();
    std::optional<std::pair<int, Stop>> stop;
    int64_t done = -1;
    bool chief = false;
    lock.lock();
    publish_.insert(publish_.begin(), out.begin() + static_cast<std::ptrdiff_t>(sent), out.end());
    backoff = failing;
    if (last) return;
    const bool look = !failing && round >= 0 && round == round_;
    lock.unlock();
    if (look) {
      const std::string prefix = "launch/r" + std::to_string(round) + "/";
      try {
        if (!stop_known && client_->check({prefix + "stop"})) stop = parse_stop(client_->get(prefix + "stop"));
        done = client_->num_keys_with_prefix(prefix + "done/");
        if (options_.layout.chief && options_.layout.ps > 0) chief = client_->check({prefix + "chief_done"});
      } catch (const Error&) {
        backoff = true;
      }
    }
    lock.lock();
    if (round != round_) continue;  // a new round began meanwhile: what was read is stale
    if (stop && stop->first != options_.node_rank) remote_stop_ = stop->second;
    if (done >= 0) nodes_done_ = static_cast<int>(done);
    chief_done_ = chief_done_ || chief;
  }
}

void Rendezvous::stop_watcher() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

std::vector<std::string> Rendezvous::leave(const std::string& how) {
  stop_watcher();  // after what it had to publish is out
  if (!client_) return {};
  const auto lost = [this] {
    std::lock_guard lock(mu_);
    return lost_;
  };
  if (options_.node_rank != 0) {
    const auto deadline = Clock::now() + options_.node_timeout + std::chrono::seconds(2);
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (master_gone_) return lost_;  // no one to tell
      }
      try {
        client_->set("launch/left/" + std::to_string(options_.node_rank), how);
        break;
      } catch (const Error& e) {
        if (!lost().empty()) return lost();
        if (Clock::now() >= deadline) {
          return {"node 0 of " + std::to_string(options_.layout.nnodes) + " (the master, serving the rendezvous at " +
                  master() + ") did not answer: " + e.what()};
        }
        ::usleep(200000);
      }
    }
    try {
      client_->disconnect();
    } catch (const Error&) {
      client_->stop_heartbeats();
    }
    return lost();
  }
  // Node 0: serve until every other node has left or was lost, so that each has seen how the job ended.
  const auto wait = milliseconds(static_cast<int64_t>(options_.stop_timeout * 1000)) + options_.node_timeout +
                    std::chrono::seconds(5);
  const auto deadline = Clock::now() + wait;
  std::vector<bool> gone(static_cast<size_t>(options_.layout.nnodes), false);
  gone[0] = true;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      for (int n = 1; n < options_.layout.nnodes; ++n) {
        const std::string name = "node " + std::to_string(n) + " of";
        for (const auto& l : lost_) gone[n] = gone[n] || l.rfind(name, 0) == 0;
      }
    }
    std::vector<int> waiting;
    for (int n = 1; n < options_.layout.nnodes; ++n) {
      if (gone[n]) continue;
      try {
        gone[n] = client_->check({"launch/left/" + std::to_string(n)});
      } catch (const Error&) {
      }
      if (!gone[n]) waiting.push_back(n);
    }
    if (waiting.empty()) break;
    if (Clock::now() >= deadline) {
      say("node" + std::string(waiting.size() == 1 ? " " : "s ") + join_ranks(waiting) + " did not leave within " +
          seconds_text(std::chrono::duration_cast<milliseconds>(wait)) + " s; no longer serving the rendezvous");
      break;
    }
    ::usleep(100000);
  }
  client_->stop_heartbeats();
  service_->stop();
  return lost();
}

}  // namespace strata::cli::launch
