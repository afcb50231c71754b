// Store: the small key/value service that ranks rendezvous through (c10d's Store, gloo's rendezvous::Store).
// Communicators bootstrap their connections through one (Gloo writes each rank's address under a key and
// waits for the others'), and the coordination service (strata/cluster) serves one to every task of a job.
//
//   auto store = comm::make_in_memory_store();                // ranks that are threads of one process
//   auto group = comm::make_prefix_store(store, "epoch-3/dp"); // a fresh prefix per group: groups can be rebuilt
//   group->set("rank-0", "127.0.0.1:4711");
//   group->wait({"rank-1"}, std::chrono::seconds(30));        // Timeout naming the keys still missing
//   std::string peer = group->get("rank-1");
//
// Values are bytes (std::string). `get` blocks until the key exists (bounded by the store's timeout);
// `add` treats the value as a decimal int64 counter (a missing key counts as 0) and returns the new
// value; `compare_set(key, expected, desired)` sets `desired` when the current value is `expected` (an
// empty `expected` matching a missing key) and returns the value now stored.
//
// Implementations: InMemoryStore (threads of one process), FileStore (processes sharing a directory on one
// machine), PrefixStore (a namespace inside another store), and the coordination service's client
// (strata/cluster). Every wait is bounded: a key that does not come is a Timeout naming the keys.
//
// Thread-safety: every Store may be used from many threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata::comm {

class Store {
 public:
  // How long get/wait wait when no timeout is given.
  static constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::seconds(300)};

  virtual ~Store();
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists (at most timeout()), then returns its value. Timeout names the key.
  virtual std::string get(const std::string& key) = 0;
  // Atomically adds `delta` to the decimal counter at `key` (missing: 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Atomically: if the value at `key` equals `expected` (empty `expected`: the key is missing), store
  // `desired`. Returns the value stored at `key` afterwards.
  virtual std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) = 0;
  // Whether every key exists now (no waiting).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Blocks until every key exists; Timeout after `timeout`, naming the keys still missing.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  // Removes `key`; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;
  // How many keys the store holds (under a PrefixStore: those with its prefix).
  virtual int64_t num_keys() = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 protected:
  explicit Store(std::chrono::milliseconds timeout = kDefaultTimeout) : timeout_(timeout) {}

 private:
  std::chrono::milliseconds timeout_;
};

// Keys in memory, for ranks that are threads of one process. Waits are woken as keys arrive.
std::shared_ptr<Store> make_in_memory_store(std::chrono::milliseconds timeout = Store::kDefaultTimeout);

// Keys as files in `directory` (created if missing), shared by the processes of one machine that open
// the same directory; writes are atomic (a temporary file renamed), counters and compare_set are
// serialised by an advisory lock on the directory's lock file.
std::shared_ptr<Store> make_file_store(const std::string& directory,
                                       std::chrono::milliseconds timeout = Store::kDefaultTimeout);

// Every key of `inner` under "<prefix>/": a fresh namespace per group (or per membership epoch).
std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> inner, const std::string& prefix);

}  // namespace strata::comm
