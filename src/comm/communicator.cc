// The abstract Work and Communicator (strata/comm/communicator.h): out-of-line destructors and names.
// Thread-safety: pure functions.
#include "strata/comm/communicator.h"

namespace strata::comm {

Work::~Work() = default;
Communicator::~Communicator() = default;

std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

}  // namespace strata::comm
