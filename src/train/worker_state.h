// What every worker of a job must hold alike, sent from the chief: after BackupAndRestore restored a checkpoint on
// every worker, and to a worker that joins an elastic group mid-training (src/distribute/elastic_step_runner.cc).
// Thread-safety: fit's driving thread; a collective over the model's strategy, called by every worker alike.
#pragma once

#include <cstdint>

#include "strata/train/model.h"

namespace strata::detail {

// The model's weights (every local copy) and the optimizer's state (its slots and step count) become the chief's on
// every worker, as at creation (TensorFlow broadcasts restored variables too). Nothing with one worker. Returns the
// bytes broadcast.
int64_t broadcast_state_from_chief(Model& model);

}  // namespace strata::detail
