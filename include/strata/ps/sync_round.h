// A synchronous round of parameter-server training (CoordinatorOptions::max_staleness = 0): the closures the
// coordinator runs in lockstep, one per worker up when the round began. Each closure passes its round with its ps
// pushes; a shard sums the round's gradients and applies their mean once `size` distinct steps have pushed, so the
// update is the one synchronous training on the concatenated batches would make (for Adam and momentum too).
// Thread-safety: a plain value.
#pragma once

#include <cstdint>

namespace strata::ps {

struct SyncRound {
  int64_t id = 0;    // unique per round: the step id of the round's first closure
  int64_t size = 0;  // the closures (distinct steps) whose pushes make the round's update; 0: no round

  bool defined() const { return size > 0; }
};

}  // namespace strata::ps
