// Whole prefixed lines out of a byte stream (see prefixed_lines.h).
// Thread-safety: see the header.
#include "cli/prefixed_lines.h"

#include <unistd.h>

#include <cerrno>

namespace strata::cli {

std::string PrefixedLines::feed(const std::string& prefix, const char* data, size_t n) {
  std::string text;
  partial_.append(data, n);
  size_t begin = 0;
  for (size_t nl; (nl = partial_.find('\n', begin)) != std::string::npos; begin = nl + 1) {
    text += prefix;
    text.append(partial_, begin, nl + 1 - begin);
  }
  partial_.erase(0, begin);
  while (partial_.size() >= kMaxLine) {  // a line without end: cut it
    text += prefix;
    text.append(partial_, 0, kMaxLine);
    text += '\n';
    partial_.erase(0, kMaxLine);
  }
  return text;
}

std::string PrefixedLines::rest(const std::string& prefix) {
  std::string text;
  if (!partial_.empty()) text = prefix + partial_ + "\n";
  partial_.clear();
  return text;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace strata::cli
