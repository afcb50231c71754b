// Internals shared by the Store implementations (strata/comm/store.h): counter parsing, the Timeout message
// of a wait, and the hook a PrefixStore uses to count the keys under its prefix.
// Thread-safety: pure functions; KeyCounter implementations are as thread-safe as their Store.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::comm::detail {

// Stores that can count the keys starting with a prefix implement this too, so that a PrefixStore over them
// can answer num_keys() (the Store interface has no listing).
class KeyCounter {
 public:
  virtual ~KeyCounter() = default;
  virtual int64_t num_keys_with_prefix(const std::string& prefix) = 0;
};

// The counter stored at `key` for add(): "" (missing) is 0; anything but a whole decimal int64 is
// InvalidArgument naming the store, the key and the value.
int64_t parse_counter(const std::string& store, const std::string& key, const std::string& value);

// `a + delta`, or InvalidArgument naming the key when it leaves int64.
int64_t add_counter(const std::string& store, const std::string& key, int64_t a, int64_t delta);

// Throws Timeout: "<store>: waited <ms> ms for <n> keys; still missing: 'a', 'b'".
[[noreturn]] void throw_wait_timeout(const std::string& store, const std::vector<std::string>& keys,
                                     const std::vector<std::string>& missing, std::chrono::milliseconds waited);

}  // namespace strata::comm::detail
