// `strata train --log-format json` (see json_log.h).
#include "cli/json_log.h"

#include <charconv>
#include <cmath>

#include "strata/train/model.h"

namespace strata::cli {

namespace {

void append_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

void append_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  out.append(buf, r.ptr);
}

}  // namespace

std::string json_epoch_line(int64_t epoch, const Logs& logs, double input_wait_fraction) {
  std::string line = "{\"epoch\": " + std::to_string(epoch + 1);
  for (const auto& [name, value] : logs.items()) {
    line += ", ";
    append_string(line, name);
    line += ": ";
    append_number(line, value);
  }
  line += ", \"input_wait_fraction\": ";
  append_number(line, input_wait_fraction);
  return line + "}";
}

void JsonEpochLogger::on_epoch_end(int64_t epoch, const Logs& logs) {
  std::FILE* out = out_ != nullptr ? out_ : stdout;
  const double waited = model() != nullptr ? model()->input_wait_fraction() : 0;
  std::fprintf(out, "%s\n", json_epoch_line(epoch, logs, waited).c_str());
  std::fflush(out);
}

}  // namespace strata::cli
