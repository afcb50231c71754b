// RemoteValue (strata/ps/remote_value.h): a handle on the state the coordinator fills in.
// Thread-safety: see remote_value_state.h.
#include "strata/ps/remote_value.h"

#include "ps/remote_value_state.h"
#include "strata/error.h"

namespace strata::ps {

RemoteValue::RemoteValue(std::shared_ptr<detail::RemoteValueState> state) : state_(std::move(state)) {}

std::string RemoteValue::fetch() const {
  STRATA_CHECK(state_, InvalidArgument, "RemoteValue: fetch() of a value no closure was scheduled for");
  std::unique_lock lock(state_->mu);
  if (!state_->ready && state_->on_wait) {
    lock.unlock();
    state_->on_wait(+1);
    lock.lock();
    state_->cv.wait(lock, [&] { return state_->ready; });
    lock.unlock();
    state_->on_wait(-1);
    lock.lock();
  }
  state_->cv.wait(lock, [&] { return state_->ready; });
  if (state_->error) std::rethrow_exception(state_->error);
  return state_->result;
}

bool RemoteValue::is_ready() const {
  STRATA_CHECK(state_, InvalidArgument, "RemoteValue: is_ready() of a value no closure was scheduled for");
  std::lock_guard lock(state_->mu);
  return state_->ready;
}

int64_t RemoteValue::step_id() const {
  STRATA_CHECK(state_, InvalidArgument, "RemoteValue: step_id() of a value no closure was scheduled for");
  return state_->step_id;
}

}  // namespace strata::ps
