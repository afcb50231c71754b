// Reading one mapping of a job YAML file with every value checked where it is read: its type, its
// range (finite numbers in a Range), that every key present was asked for, and that no mapping of the
// document repeats a key. Every error names the file, the line and the key path
// ("job.yaml:9: optimizer.learning_rate: must be a finite number > 0, got -1"). Used by job.cc.
//
// Thread-safety: a Section belongs to one thread; the free functions share no state.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "strata/error.h"

namespace strata::cli::detail {

// Drops the " [src/file.cc:12]" a strata error ends with, for quoting one error inside another.
inline std::string without_location(const std::string& message) {
  const auto pos = message.rfind(" [");
  return pos != std::string::npos && message.back() == ']' ? message.substr(0, pos) : message;
}

// The values a number may take: finite, and between lo and hi (each bound open or closed).
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;

  // Finite as a float too (|v| <= FLT_MAX): every setting is used as a float.
  bool contains(double v) const {
    if (!std::isfinite(v) || std::fabs(v) > FLT_MAX) return false;
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  // " > 0", " >= 0", " in [0, 1)" or "".
  std::string describe() const {
    std::ostringstream out;
    const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
    if (has_lo && has_hi) {
      out << " in " << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]");
    } else if (has_lo) {
      out << (lo_open ? " > " : " >= ") << lo;
    } else if (has_hi) {
      out << (hi_open ? " < " : " <= ") << hi;
    }
    return out.str();
  }
};
inline constexpr Range kAnyNumber{};
inline constexpr Range kPositive{.lo = 0, .lo_open = true};
inline constexpr Range kNonNegative{.lo = 0};
inline constexpr Range kFraction{.lo = 0, .hi = 1, .hi_open = true};  // [0, 1): momenta, betas, decay rates, dropout
inline constexpr Range kUnit{.lo = 0, .hi = 1};                          // [0, 1]

// A YAML mapping whose keys are read one by one; `finish` rejects any key nobody asked for. Every error
// names the file, the line and the key path.
class Section {
 public:
  Section(YAML::Node node, std::string path, std::string file)
      : node_(std::move(node)), path_(std::move(path)), file_(std::move(file)) {
    if (node_ && !node_.IsNull()) {
      STRATA_CHECK(node_.IsMap(), InvalidArgument, where(node_) << path_ << ": expected a mapping of keys");
    }
  }

  std::string where(const YAML::Node& n) const {
    std::ostringstream out;
    out << file_;
    if (n && n.Mark().line >= 0) out << ":" << n.Mark().line + 1;
    out << ": ";
    return out.str();
  }
  std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // The job file this section is read from (for a nested Section).
  const std::string& file() const { return file_; }

  YAML::Node get(const std::string& key) {
    known_.insert(key);
    static const YAML::Node kEmptyMap = YAML::Load("{}");
    const YAML::Node& map = (!node_ || node_.IsNull()) ? kEmptyMap : node_;
    return map[key];  // const lookup: an undefined node when absent
  }
  bool has(const std::string& key) {
    return static_cast<bool>(get(key));
  }

  template <class T>
  T scalar(const std::string& key, const T& fallback, const char* expected) {
    YAML::Node n = get(key);
    if (!n) return fallback;
    try {
      STRATA_CHECK(n.IsScalar(), InvalidArgument, "");
      return n.as<T>();
    } catch (const std::exception&) {
      STRATA_THROW(InvalidArgument, where(n) << key_path(key) << ": expected " << expected << ", got '"
                                             << YAML::Dump(n) << "'");
    }
  }
  std::string string(const std::string& key, const std::string& fallback = "") {
    return scalar<std::string>(key, fallback, "a string");
  }
  std::string required_string(const std::string& key) {
    if (!has(key)) defer(where(node_) + key_path(key) + " is required");
    return string(key);
  }
  // A number in `range` (finite, whatever the range), or an InvalidArgument
  // "job.yaml:12: optimizer.learning_rate: must be a finite number > 0, got -1". YAML's .nan and .inf
  // read as numbers and are rejected here.
  double number(const std::string& key, double fallback, const Range& range) {
    const double v = scalar<double>(key, fallback, "a number");
    if (has(key)) {
      const YAML::Node n = get(key);
      STRATA_CHECK(range.contains(v), InvalidArgument,
                   where(n) << key_path(key) << ": must be a finite number" << range.describe() << ", got "
                            << n.Scalar());
    }
    return v;
  }
  int64_t integer(const std::string& key, int64_t fallback) { return scalar<int64_t>(key, fallback, "an integer"); }
  // An integer >= `min`: "job.yaml:3: data.shuffle: must be an integer >= 0, got -1".
  int64_t integer_at_least(const std::string& key, int64_t fallback, int64_t min) {
    const int64_t v = integer(key, fallback);
    STRATA_CHECK(!has(key) || v >= min, InvalidArgument,
                 where(get(key)) << key_path(key) << ": must be an integer >= " << min << ", got " << v);
    return v;
  }
  // A seed: an integer >= 0.
  uint64_t seed(const std::string& key, uint64_t fallback) {
    return static_cast<uint64_t>(integer_at_least(key, static_cast<int64_t>(fallback), 0));
  }
  // A name that `make` (a constructor or lookup taking the name) accepts; its InvalidArgument ("unknown
  // activation 'relux'; known: ...") is raised again with the file, line and key.
  template <class Make>
  auto named(const std::string& key, const std::string& fallback, Make make) {
    const std::string value = string(key, fallback);
    try {
      return make(value);
    } catch (const InvalidArgument& e) {
      STRATA_THROW(InvalidArgument, where(has(key) ? get(key) : node_) << key_path(key) << ": "
                                                                       << without_location(e.what()));
    }
  }
  // A missing required key (fallback 0) or a value below 1 is reported by finish(), after unknown keys:
  // "unit: 10" should say the key is unknown rather than that "units" is missing.
  int64_t positive(const std::string& key, int64_t fallback) {
    const int64_t v = integer(key, fallback);
    if (!has(key) && fallback <= 0) {
      defer(where(node_) + key_path(key) + " is required");
    } else if (v <= 0) {
      defer(where(get(key)) + key_path(key) + ": must be positive, got " + std::to_string(v));
    }
    return v;
  }
  bool flag(const std::string& key, bool fallback) { return scalar<bool>(key, fallback, "true or false"); }
  std::vector<int64_t> integers(const std::string& key, std::vector<int64_t> fallback) {
    YAML::Node n = get(key);
    if (!n) return fallback;
    if (n.IsScalar()) return {scalar<int64_t>(key, 0, "an integer or a list of integers")};
    std::vector<int64_t> out;
    try {
      STRATA_CHECK(n.IsSequence(), InvalidArgument, "");
      for (const auto& item : n) out.push_back(item.as<int64_t>());
    } catch (const std::exception&) {
      STRATA_THROW(InvalidArgument, where(n) << key_path(key) << ": expected a list of integers");
    }
    return out;
  }
  std::vector<std::string> strings(const std::string& key) {
    YAML::Node n = get(key);
    if (!n) return {};
    if (n.IsScalar()) return {n.as<std::string>()};
    std::vector<std::string> out;
    STRATA_CHECK(n.IsSequence(), InvalidArgument, where(n) << key_path(key) << ": expected a list of strings");
    for (const auto& item : n) {
      STRATA_CHECK(item.IsScalar(), InvalidArgument, where(item) << key_path(key) << ": expected a list of strings");
      out.push_back(item.as<std::string>());
    }
    return out;
  }

  void defer(const std::string& message) {
    if (deferred_.empty()) deferred_ = message;
  }

  // Every key present must have been asked for; then the first deferred value error.
  void finish() const {
    finish_unknown_keys();
    STRATA_CHECK(deferred_.empty(), InvalidArgument, deferred_);
  }

 private:
  void finish_unknown_keys() const {
    if (!node_ || !node_.IsMap()) return;
    for (const auto& kv : node_) {
      // A key may be any node ("? [a, b]: 1"); one that is not a name is unknown, named as YAML writes it.
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : YAML::Dump(kv.first);
      if (known_.count(key) != 0) continue;
      std::ostringstream known;
      for (const auto& k : known_) known << (known.tellp() > 0 ? ", " : "") << k;
      STRATA_THROW(InvalidArgument, where(kv.first) << "unknown key '" << key_path(key) << "'; known keys here: "
                                                    << known.str());
    }
  }

  const YAML::Node node_;
  std::string path_, file_;
  std::set<std::string> known_;
  std::string deferred_;  // the first value error, raised by finish() after any unknown key
};

// yaml-cpp keeps every pair of a mapping but finds a key's first value, so a repeated key would be
// silently ignored: "job.yaml:9: optimizer.learning_rate: repeated key (first on line 7)". Checks every
// mapping in the document, at any depth.
inline void check_unique_keys(const YAML::Node& node, const std::string& file, const std::string& path) {
  if (node.IsMap()) {
    std::map<std::string, int> first_line;
    for (const auto& kv : node) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : YAML::Dump(kv.first);
      const std::string key_path = path.empty() ? key : path + "." + key;
      const int line = kv.first.Mark().line + 1;
      const auto [it, fresh] = first_line.emplace(key, line);
      STRATA_CHECK(fresh, InvalidArgument,
                   file << ":" << line << ": " << key_path << ": repeated key (first on line " << it->second << ")");
      check_unique_keys(kv.second, file, key_path);
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) check_unique_keys(node[i], file, path + "[" + std::to_string(i) + "]");
  }
}

}  // namespace strata::cli::detail
