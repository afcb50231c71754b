// SLURM's hostlist and tasks-per-node formats, and STRATA_SLURM_JOBS (see strata/cluster/slurm.h). Errors are
// InvalidArgument naming the variable, its value and the problem.
// Thread-safety: pure functions.
#include "strata/cluster/slurm.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

#include "strata/error.h"

namespace strata::cluster {
namespace {

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

// A non-empty string of decimal digits as a number, else nullopt (no sign, no spaces, no overflow).
std::optional<uint64_t> parse_digits(const std::string& s) {
  if (!all_digits(s)) return std::nullopt;
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string trim(const std::string& s) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  const auto begin = std::find_if_not(s.begin(), s.end(), space);
  const auto end = std::find_if_not(s.rbegin(), s.rend(), space).base();
  return begin < end ? std::string(begin, end) : std::string();
}

std::vector<std::string> split(const std::string& s, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(separator, start);
    parts.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

bool hostlist_separator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n'; }

// Throws InvalidArgument "<prefix><why>"; the prefix names the variable and its value.
struct Complaint {
  std::string prefix;
  [[noreturn]] void operator()(const std::string& why) const { STRATA_THROW(InvalidArgument, prefix << why); }
};

std::string zero_padded(uint64_t value, size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// Parses the inside of one bracket group ("01-03,07") into the numbers it names, formatted.
std::vector<std::string> expand_ranges(const std::string& ranges, const Complaint& fail) {
  std::vector<std::string> values;
  for (const std::string& range : split(ranges, ',')) {
    if (range.empty()) fail("an empty range in '[" + ranges + "]'");
    const size_t dash = range.find('-');
    const std::string lo_text = range.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
    const auto lo = parse_digits(lo_text);
    const auto hi = parse_digits(hi_text);
    if (!lo || !hi) fail("'" + range + "' is not a number or a range lo-hi of decimal numbers");
    if (*hi < *lo) fail("the range '" + range + "' ends below its start");
    if (*hi - *lo >= static_cast<uint64_t>(kMaxSlurmExpansion)) {
      fail("the range '" + range + "' names more than " + std::to_string(kMaxSlurmExpansion) + " hosts");
    }
    for (uint64_t v = *lo;; ++v) {
      values.push_back(zero_padded(v, lo_text.size()));
      if (v == *hi) break;
    }
  }
  return values;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& hostlist, const std::string& variable) {
  const Complaint fail{variable + ": bad hostlist '" + hostlist + "': "};
  std::vector<std::string> hosts;
  // The names of the token being read so far: each bracket group multiplies them by its values.
  std::vector<std::string> names = {""};
  std::string literal;  // text since the last bracket group
  bool in_token = false;
  const auto flush_literal = [&] {
    for (std::string& name : names) name += literal;
    literal.clear();
  };
  const auto end_token = [&] {
    if (!in_token) return;
    flush_literal();
    if (hosts.size() + names.size() > static_cast<size_t>(kMaxSlurmExpansion)) {
      fail("it names more than " + std::to_string(kMaxSlurmExpansion) + " hosts");
    }
    hosts.insert(hosts.end(), names.begin(), names.end());
    names = {""};
    in_token = false;
  };
  for (size_t i = 0; i < hostlist.size(); ++i) {
    const char c = hostlist[i];
    if (hostlist_separator(c)) {
      end_token();
    } else if (c == '[') {
      const size_t close = hostlist.find(']', i + 1);
      if (close == std::string::npos) fail("'[' without ']'");
      const std::string ranges = hostlist.substr(i + 1, close - i - 1);
      if (ranges.find('[') != std::string::npos) fail("'[' inside brackets");
      const std::vector<std::string> values = expand_ranges(ranges, fail);
      flush_literal();
      if (names.size() * values.size() > static_cast<size_t>(kMaxSlurmExpansion)) {
        fail("it names more than " + std::to_string(kMaxSlurmExpansion) + " hosts");
      }
      std::vector<std::string> multiplied;
      multiplied.reserve(names.size() * values.size());
      for (const std::string& name : names) {
        for (const std::string& value : values) multiplied.push_back(name + value);
      }
      names = std::move(multiplied);
      in_token = true;
      i = close;
    } else if (c == ']') {
      fail("']' without '['");
    } else {
      literal += c;
      in_token = true;
    }
  }
  end_token();
  if (hosts.empty()) fail("it names no host");
  return hosts;
}

std::vector<int64_t> expand_tasks_per_node(const std::string& tasks_per_node, const std::string& variable) {
  const Complaint fail{variable + ": bad tasks-per-node list '" + tasks_per_node + "': "};
  if (tasks_per_node.empty()) fail("it is empty (want counts like '2(x3),1')");
  std::vector<int64_t> counts;
  for (const std::string& entry : split(tasks_per_node, ',')) {
    const size_t paren = entry.find('(');
    const auto count = parse_digits(entry.substr(0, paren));
    std::optional<uint64_t> repeats = 1;
    if (paren != std::string::npos) {
      const bool framed = entry.size() > paren + 3 && entry.compare(paren, 2, "(x") == 0 && entry.back() == ')';
      repeats = framed ? parse_digits(entry.substr(paren + 2, entry.size() - paren - 3)) : std::nullopt;
    }
    if (!count || !repeats) fail("'" + entry + "' is not a task count N or N(xREPEATS)");
    if (*count > static_cast<uint64_t>(kMaxSlurmExpansion)) {
      fail("'" + entry + "' puts more than " + std::to_string(kMaxSlurmExpansion) + " tasks on a node");
    }
    if (*repeats < 1) fail("'" + entry + "' repeats its count 0 times (want 1 or more)");
    if (counts.size() + *repeats > static_cast<uint64_t>(kMaxSlurmExpansion)) {
      fail("it covers more than " + std::to_string(kMaxSlurmExpansion) + " nodes");
    }
    counts.insert(counts.end(), static_cast<size_t>(*repeats), static_cast<int64_t>(*count));
  }
  return counts;
}

std::map<std::string, int64_t> parse_slurm_jobs(const std::string& jobs, const std::string& variable) {
  const Complaint fail{variable + "='" + jobs + "': "};
  std::map<std::string, int64_t> counts;
  for (const std::string& raw : split(jobs, ',')) {
    const std::string entry = trim(raw);
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) {
      fail("'" + entry + "' is not type:count (want entries like chief:1,worker:2,ps:1)");
    }
    const std::string type = trim(entry.substr(0, colon));
    const std::string count_text = trim(entry.substr(colon + 1));
    if (type != "chief" && type != "worker" && type != "ps" && type != "evaluator") {
      fail("unknown task type '" + type + "'; the task types are chief, worker, ps, evaluator");
    }
    const auto count = parse_digits(count_text);
    if (!count || *count > static_cast<uint64_t>(kMaxSlurmExpansion)) {
      fail("the count of " + type + " must be a number 0.." + std::to_string(kMaxSlurmExpansion) + ", got '" +
           count_text + "'");
    }
    if (!counts.emplace(type, static_cast<int64_t>(*count)).second) fail("'" + type + "' is listed twice");
  }
  for (const char* single : {"chief", "evaluator"}) {
    if (counts.count(single) && counts[single] > 1) {
      fail(std::string("there must be at most one ") + single + ", got " + std::to_string(counts[single]));
    }
  }
  std::erase_if(counts, [](const auto& entry) { return entry.second == 0; });
  return counts;
}

}  // namespace strata::cluster
