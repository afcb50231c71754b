// The nccl seam (strata/comm/nccl.h): make_nccl_communicator throws Unavailable with a message that says what it
// needs and what to use on CPU. Thread-safety: single-threaded.
#include <gtest/gtest.h>

#include "comm/comm_test_util.h"
#include "strata/comm/nccl.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::comm {
namespace {

using test::contains;
using test::message_of;

TEST(NcclCommunicator, UnavailableUntilTheCudaIssue) {
  auto store = make_in_memory_store();
  const std::string message =
      message_of<Unavailable>([&] { make_nccl_communicator(store, 0, 2, {.timeout = std::chrono::seconds(1)}); });
  EXPECT_TRUE(contains(message,
                       "the nccl backend needs the CUDA build (STRATA_WITH_CUDA=ON) and GPU tensors; on CPU use gloo "
                       "or mpi"))
      << message;
  EXPECT_TRUE(contains(message, "nccl.cc:")) << message;  // the check macro's location
}

}  // namespace
}  // namespace strata::comm
