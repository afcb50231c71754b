// `strata train --log-format json` (see json_log.h).
#include "cli/json_log.h"

#include <nlohmann/json.hpp>

#include "strata/train/model.h"

namespace strata::cli {

std::string json_epoch_line(int64_t epoch, const Logs& logs, double input_wait_fraction) {
  // Each key and value is written by nlohmann (string escapes; doubles in their shortest round-trip form, NaN and
  // infinity as null), joined with ": " and ", " so that a person can read the line too.
  std::string line = "{\"epoch\": " + std::to_string(epoch + 1);
  const auto add = [&line](const std::string& name, double value) {
    line += ", " + nlohmann::json(name).dump() + ": " + nlohmann::json(value).dump();
  };
  for (const auto& [name, value] : logs.items()) add(name, value);
  add("input_wait_fraction", input_wait_fraction);
  return line + "}";
}

void JsonEpochLogger::on_epoch_end(int64_t epoch, const Logs& logs) {
  std::FILE* out = out_ != nullptr ? out_ : stdout;
  const double waited = model() != nullptr ? model()->input_wait_fraction() : 0;
  std::fprintf(out, "%s\n", json_epoch_line(epoch, logs, waited).c_str());
  std::fflush(out);
}

}  // namespace strata::cli
