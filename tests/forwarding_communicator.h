// A communicator that passes the operations every backend has to another: the base of the tests' wrappers that
// record or count what goes through a group (they override only what they observe). The options overloads and
// set_step keep Communicator's defaults (an options call without a timeout comes back to the plain one, so a
// wrapper sees it). Header-only, for tests that link comm.
// Thread-safety: as the communicator it wraps.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strata/comm/communicator.h"

namespace strata::test {

class ForwardingCommunicator : public comm::Communicator {
 public:
  explicit ForwardingCommunicator(std::shared_ptr<comm::Communicator> inner) : inner_(std::move(inner)) {}
  using comm::Communicator::all_gather;
  using comm::Communicator::all_reduce;
  using comm::Communicator::barrier;
  using comm::Communicator::broadcast;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  std::shared_ptr<comm::Work> all_reduce(std::vector<Tensor> tensors, comm::ReduceOp op) override {
    return inner_->all_reduce(std::move(tensors), op);
  }
  std::shared_ptr<comm::Work> broadcast(std::vector<Tensor> tensors, int root) override {
    return inner_->broadcast(std::move(tensors), root);
  }
  std::shared_ptr<comm::Work> all_gather(Tensor input, Tensor output) override {
    return inner_->all_gather(std::move(input), std::move(output));
  }
  void barrier() override { inner_->barrier(); }
  void abort(const std::string& reason) override { inner_->abort(reason); }

 protected:
  const std::shared_ptr<comm::Communicator>& inner() const { return inner_; }

 private:
  std::shared_ptr<comm::Communicator> inner_;
};

}  // namespace strata::test
