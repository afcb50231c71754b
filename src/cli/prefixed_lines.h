// Whole lines with a prefix: how `strata launch` copies its tasks' output ("[worker:1] ...") and how a rank's
// output is tagged under mpirun and srun (tagged_output.h). Bytes go in as they arrive; whole lines come out, each
// with the prefix; a line longer than kMaxLine is cut into pieces; the unfinished last line comes out at the end.
// Thread-safety: a PrefixedLines is used by one thread; write_all is safe from any thread.
#pragma once

#include <cstddef>
#include <string>

namespace strata::cli {

class PrefixedLines {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  // Takes `n` bytes; returns every line they completed, each prefixed (possibly "").
  std::string feed(const std::string& prefix, const char* data, size_t n);
  // Returns the unfinished last line, prefixed and ended with '\n' ("" when there is none), and forgets it.
  std::string rest(const std::string& prefix);

 private:
  std::string partial_;
};

// Writes all of `text` to `fd`, retrying after signals; a closed reader (EPIPE) drops the rest.
void write_all(int fd, const std::string& text);

}  // namespace strata::cli
