// fit's and evaluate's way of telling every callback one event, used by the loops of src/train/model.cc. Private
// to the train layer.
// Thread-safety: called from the thread that drives fit.
#pragma once

#include <memory>
#include <vector>

#include "strata/train/callbacks.h"

namespace strata::detail {

// fn(*cb) for each callback, in order.
template <class F>
void run_callbacks(const std::vector<std::shared_ptr<Callback>>& callbacks, F fn) {
  for (const auto& cb : callbacks) fn(*cb);
}

}  // namespace strata::detail
