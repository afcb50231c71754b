// `strata train --log-format json`: one JSON object per epoch on stdout instead of the progress bar, for
// programs that read the run as it goes:
//   {"epoch": 1, "loss": 0.5123, "accuracy": 0.8125, "input_wait_fraction": 0.01}
// "epoch" counts from 1, as the progress bar's "Epoch 1/5" does; then every log of the epoch in fit's order
// (loss, metrics, val_*), each number in the fewest digits that read back as the same double, and
// "input_wait_fraction" (the share of the epoch fit waited for input, 0..1). NaN and infinities, which JSON
// cannot hold, are written as null.
//
// Thread-safety: the callback is driven by the thread that runs fit.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "strata/train/callbacks.h"

namespace strata::cli {

// The object for epoch `epoch` (0-based, as fit counts) with `logs` and the input-wait fraction: one line, no
// newline.
std::string json_epoch_line(int64_t epoch, const Logs& logs, double input_wait_fraction);

// Prints json_epoch_line at each epoch's end on `out` (stdout by default), flushed.
class JsonEpochLogger : public Callback {
 public:
  explicit JsonEpochLogger(std::FILE* out = nullptr) : out_(out) {}
  void on_epoch_end(int64_t epoch, const Logs& logs) override;

 private:
  std::FILE* out_;
};

}  // namespace strata::cli
