// Point-to-point send/recv of the local backend (strata/comm/communicator.h).
//
// Sends and recvs run on the rank's worker in issue order with its collectives. A send copies its tensors
// into a Message in the destination's inbox and completes (so two ranks may each send before they receive;
// the send's timeout has nothing to wait for). A recv takes the first message of its source with its tag,
// blocking its worker until one comes, its timeout passes (Timeout naming the source and where it is), or the
// group is aborted. So messages of one source and tag arrive in the order sent; different tags may be
// received in any order. A recv that timed out fails alone (the group goes on); a message sent after that
// waits for the next recv of its source and tag.
// Thread-safety: an inbox is guarded by its mutex; the rest runs on the rank's worker (local_internal.h).
#include <algorithm>
#include <sstream>

#include "comm/local_internal.h"

namespace strata::comm::local_detail {

void LocalCommunicator::check_peer(const char* what, const char* role, int peer) const {
  STRATA_CHECK(
      peer >= 0 && peer < group_->size && peer != rank_, InvalidArgument,
      what << " on rank " << rank_ << ": " << role << " " << peer << " is not another rank of " << group_->name);
}

std::shared_ptr<Work> LocalCommunicator::send(std::vector<Tensor> tensors, int dst, const SendOptions& options) {
  check_peer("send", "dst", dst);
  return issue(Kind::kSend, std::move(tensors), ReduceOp::kSum, dst, timeout_of("send", options.timeout), options.tag);
}

std::shared_ptr<Work> LocalCommunicator::recv(std::vector<Tensor> tensors, int src, const RecvOptions& options) {
  check_peer("recv", "src", src);
  return issue(Kind::kRecv, std::move(tensors), ReduceOp::kSum, src, timeout_of("recv", options.timeout), options.tag);
}

namespace {

std::string where(const Op& op, int rank, const std::string& group) {
  std::ostringstream out;
  out << group << ": " << op_name(op) << (op.kind == Kind::kSend ? " to" : " from") << " rank " << op.root << " (tag "
      << op.tag << ") on rank " << rank;
  return out.str();
}

}  // namespace

void LocalCommunicator::run_send(Op& op) {
  Descriptor d;
  describe(op, d);
  if (!d.local_error.empty()) STRATA_THROW(InvalidArgument, where(op, rank_, group_->name) << ": " << d.local_error);
  Message message{rank_, op.tag, {}};
  message.tensors.reserve(op.tensors.size());
  for (const Tensor& t : op.tensors) message.tensors.push_back(t.clone());
  Inbox& box = group_->inboxes[op.root];
  {
    std::lock_guard<std::mutex> lock(box.mu);
    box.messages.push_back(std::move(message));
  }
  box.cv.notify_all();
}

std::string LocalCommunicator::recv_timeout_message(const Op& op) const {
  // REQUIRES: the inbox's mutex is held (it lists the messages waiting there).
  std::ostringstream out;
  out << where(op, rank_, group_->name) << " timed out after " << op.timeout.count() << " ms: rank " << op.root
      << " sent nothing with tag " << op.tag << " to rank " << rank_;
  std::vector<int> tags;
  for (const Message& m : group_->inboxes[rank_].messages) {
    if (m.src == op.root) tags.push_back(m.tag);
  }
  if (!tags.empty()) {
    out << " (its messages waiting here have tags";
    for (size_t i = 0; i < tags.size(); ++i) out << (i ? ", " : " ") << tags[i];
    out << ")";
  }
  const RankStatus& s = group_->status[op.root];
  out << "; rank " << op.root << " has issued " << s.sends_issued.load(std::memory_order_acquire) << " sends";
  if (const int64_t p2p = s.p2p_running.load(std::memory_order_acquire); p2p != 0) {
    out << " and is in " << p2p_status(s, p2p);
  } else if (const int64_t running = s.running.load(std::memory_order_acquire); running != 0) {
    out << " and is in " << kind_name(static_cast<Kind>(s.running_kind.load(std::memory_order_relaxed))) << " #"
        << running;
  }
  return strata::detail::with_location(out.str(), __FILE__, __LINE__);
}

void LocalCommunicator::run_recv(Op& op) {
  Descriptor mine;
  describe(op, mine);
  if (!mine.local_error.empty())
    STRATA_THROW(InvalidArgument, where(op, rank_, group_->name) << ": " << mine.local_error);
  Inbox& box = group_->inboxes[rank_];
  const auto deadline = Clock::now() + op.timeout;
  Message message;
  {
    std::unique_lock<std::mutex> lock(box.mu);
    while (true) {
      auto it = std::find_if(box.messages.begin(), box.messages.end(),
                             [&](const Message& m) { return m.src == op.root && m.tag == op.tag; });
      if (it != box.messages.end()) {
        message = std::move(*it);
        box.messages.erase(it);
        break;
      }
      if (group_->barrier.aborted()) {
        STRATA_THROW(Timeout, where(op, rank_, group_->name)
                                  << " gave up because the group was aborted: " << group_->barrier.abort_reason());
      }
      const auto now = Clock::now();
      if (now >= deadline) throw Timeout(recv_timeout_message(op));
      // A timeout elsewhere aborts the group without notifying inboxes: look again at least every 20 ms.
      box.cv.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(20)));
    }
  }
  Descriptor sent;
  sent.dtype = message.tensors.empty() ? DType::kFloat32 : message.tensors[0].dtype();
  for (const Tensor& t : message.tensors) sent.shapes.push_back(t.shape());
  if (sent.shapes != mine.shapes || (!sent.shapes.empty() && sent.dtype != mine.dtype)) {
    STRATA_THROW(InvalidArgument, where(op, rank_, group_->name)
                                      << ": rank " << op.root << " sent " << describe_tensors(sent)
                                      << ", this rank receives into " << describe_tensors(mine));
  }
  for (size_t i = 0; i < op.tensors.size(); ++i) {
    if (op.tensors[i].nbytes() > 0)
      std::memcpy(op.tensors[i].raw_data(), message.tensors[i].raw_data(), op.tensors[i].nbytes());
  }
}

}  // namespace strata::comm::local_detail
