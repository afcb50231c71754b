// The rows of the global batch of the training step a replica thread runs, for Model's loss scaling
// (Model::step_rows): set for the step's duration by ScopedStepRows.
// Thread-safety: thread-local; each replica thread sets its own.
#pragma once

#include <cstdint>

namespace strata::detail {

// Rows of the global batch of the step this thread runs as a replica (0: not a replica's step). Each replica thread
// keeps its own: with several steps per hand-off, replicas may be on different steps.
extern thread_local int64_t t_step_global_rows;

class ScopedStepRows {
 public:
  explicit ScopedStepRows(int64_t rows) { t_step_global_rows = rows; }
  ~ScopedStepRows() { t_step_global_rows = 0; }
  ScopedStepRows(const ScopedStepRows&) = delete;
  ScopedStepRows& operator=(const ScopedStepRows&) = delete;
};

}  // namespace strata::detail
