// The in-memory and prefix stores (strata/comm/store.h), and the helpers every store shares.
//
// InMemoryStore keeps its keys in a map under one mutex; waiters sleep on a condition variable that every
// set/add/compare_set notifies, so a wait ends as soon as its last key arrives. PrefixStore prepends
// "<prefix>/" to every key and forwards to its inner store.
// Thread-safety: every store here may be used from many threads at once.
#include "strata/comm/store.h"

#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "comm/store_internal.h"
#include "strata/error.h"

namespace strata::comm {

Store::~Store() = default;

namespace detail {

int64_t parse_counter(const std::string& store, const std::string& key, const std::string& value) {
  if (value.empty()) return 0;
  size_t i = 0;
  const bool negative = value[0] == '-';
  if (value[0] == '-' || value[0] == '+') i = 1;
  bool ok = i < value.size();
  uint64_t magnitude = 0;
  const uint64_t limit = negative ? uint64_t{1} << 63 : static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (; ok && i < value.size(); ++i) {
    const char c = value[i];
    if (c < '0' || c > '9' || magnitude > (limit - static_cast<uint64_t>(c - '0')) / 10) {
      ok = false;
      break;
    }
    magnitude = magnitude * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!ok) {
    const std::string shown = value.size() > 64 ? value.substr(0, 64) + "..." : value;
    STRATA_THROW(InvalidArgument, store << ": add on key '" << key << "': the value '" << shown
                                        << "' is not a decimal int64 counter");
  }
  if (negative) return magnitude == (uint64_t{1} << 63) ? std::numeric_limits<int64_t>::min()
                                                        : -static_cast<int64_t>(magnitude);
  return static_cast<int64_t>(magnitude);
}

int64_t add_counter(const std::string& store, const std::string& key, int64_t a, int64_t delta) {
  int64_t sum = 0;
  STRATA_CHECK(!__builtin_add_overflow(a, delta, &sum), InvalidArgument,
               store << ": add on key '" << key << "': " << a << " + " << delta << " overflows int64");
  return sum;
}

void throw_wait_timeout(const std::string& store, const std::vector<std::string>& keys,
                        const std::vector<std::string>& missing, std::chrono::milliseconds waited) {
  std::ostringstream out;
  out << store << ": waited " << waited.count() << " ms for " << keys.size() << (keys.size() == 1 ? " key" : " keys")
      << "; still missing " << missing.size() << ":";
  for (size_t i = 0; i < missing.size(); ++i) out << (i ? ", '" : " '") << missing[i] << "'";
  STRATA_THROW(Timeout, out.str());
}

}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

class InMemoryStore final : public Store, public detail::KeyCounter {
 public:
  explicit InMemoryStore(std::chrono::milliseconds timeout) : Store(timeout) {}

  void set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      values_[key] = value;
    }
    cv_.notify_all();
  }

  std::string get(const std::string& key) override {
    std::unique_lock<std::mutex> lock(mu_);
    wait_locked(lock, {key}, timeout());
    return values_.at(key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t now = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = values_.find(key);
      const int64_t before = detail::parse_counter("in-memory store", key, it == values_.end() ? "" : it->second);
      now = detail::add_counter("in-memory store", key, before, delta);
      values_[key] = std::to_string(now);
    }
    cv_.notify_all();
    return now;
  }

  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    std::string now;
    bool changed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = values_.find(key);
      if (it == values_.end()) {
        if (expected.empty()) {
          values_[key] = desired;
          changed = true;
          now = desired;
        }
      } else if (it->second == expected) {
        it->second = desired;
        changed = true;
        now = desired;
      } else {
        now = it->second;
      }
    }
    if (changed) cv_.notify_all();
    return now;
  }

  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& key : keys) {
      if (!values_.count(key)) return false;
    }
    return true;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    wait_locked(lock, keys, timeout);
  }

  bool delete_key(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return values_.erase(key) > 0;
  }

  int64_t num_keys() override {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(values_.size());
  }

  int64_t num_keys_with_prefix(const std::string& prefix) override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t n = 0;
    for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
         ++it) {
      ++n;
    }
    return n;
  }

 private:
  // REQUIRES: `lock` holds mu_.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout) {
    auto all_there = [&] {
      for (const auto& key : keys) {
        if (!values_.count(key)) return false;
      }
      return true;
    };
    if (cv_.wait_for(lock, timeout, all_there)) return;
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      if (!values_.count(key)) missing.push_back(key);
    }
    detail::throw_wait_timeout("in-memory store", keys, missing, timeout);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;  // guarded by mu_ (ordered: prefix counts are a range)
};

class PrefixStore final : public Store, public detail::KeyCounter {
 public:
  PrefixStore(std::shared_ptr<Store> inner, const std::string& prefix)
      : Store(inner->timeout()), inner_(std::move(inner)), prefix_(prefix + "/") {}

  void set(const std::string& key, const std::string& value) override { inner_->set(join(key), value); }

  std::string get(const std::string& key) override {
    // Our timeout, not the inner store's: the two may have been set apart.
    inner_->wait({join(key)}, timeout());
    return inner_->get(join(key));
  }

  int64_t add(const std::string& key, int64_t delta) override { return inner_->add(join(key), delta); }

  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    return inner_->compare_set(join(key), expected, desired);
  }

  bool check(const std::vector<std::string>& keys) override { return inner_->check(join(keys)); }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    inner_->wait(join(keys), timeout);
  }

  bool delete_key(const std::string& key) override { return inner_->delete_key(join(key)); }

  int64_t num_keys() override { return num_keys_with_prefix(""); }

  int64_t num_keys_with_prefix(const std::string& prefix) override {
    auto* counter = dynamic_cast<detail::KeyCounter*>(inner_.get());
    STRATA_CHECK(counter != nullptr, Unavailable,
                 "prefix store '" << prefix_ << "': num_keys needs an inner store that can count keys by prefix");
    return counter->num_keys_with_prefix(prefix_ + prefix);
  }

 private:
  std::string join(const std::string& key) const { return prefix_ + key; }
  std::vector<std::string> join(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& key : keys) out.push_back(join(key));
    return out;
  }

  const std::shared_ptr<Store> inner_;
  const std::string prefix_;  // "<prefix>/"
};

}  // namespace

std::shared_ptr<Store> make_in_memory_store(std::chrono::milliseconds timeout) {
  STRATA_CHECK(timeout.count() >= 0, InvalidArgument,
               "make_in_memory_store: timeout must not be negative, got " << timeout.count() << " ms");
  return std::make_shared<InMemoryStore>(timeout);
}

std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> inner, const std::string& prefix) {
  STRATA_CHECK(inner != nullptr, InvalidArgument, "make_prefix_store: the inner store is null");
  STRATA_CHECK(!prefix.empty(), InvalidArgument, "make_prefix_store: the prefix is empty");
  return std::make_shared<PrefixStore>(std::move(inner), prefix);
}

}  // namespace strata::comm
