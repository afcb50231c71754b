// The nccl backend on the CPU (strata/comm/nccl.h): the factory says why it cannot run (no CUDA build, or no GPU),
// through make_nccl_communicator and the registry; and the bootstrap steps that need no GPU (comm/nccl_internal.h):
// claiming a prefix, NCCL's unique id through the store, and the choice of each rank's GPU; and the in-process
// group's checks. The GPU paths are in tests/cuda/nccl_test.cc and mirrored_gpu_test.cc. Thread-safety: the test thread, and one helper thread for the bootstrap wait.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "comm/comm_test_util.h"
#include "comm/nccl_internal.h"
#include "core/device_memory.h"
#include "strata/comm/backends.h"
#include "strata/comm/nccl.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::comm {
namespace {

using test::contains;
using test::expect_error_containing;
using test::message_of;

// What the factory throws on this build and machine: no CUDA build, or a CUDA build without a GPU.
std::string expected_unavailable() {
#ifdef STRATA_WITH_CUDA
  return "no CUDA device";
#else
  return "the nccl backend needs the CUDA build (STRATA_WITH_CUDA=ON) and GPU tensors; on CPU use gloo or mpi";
#endif
}

TEST(NcclCommunicator, WithoutCudaOrAGpuTheFactorySaysWhy) {
  if (::strata::detail::cuda_device_count() > 0)
    GTEST_SKIP() << "a GPU is visible: tests/cuda/nccl_test.cc runs the backend";
  auto store = make_in_memory_store();
  const std::string message =
      message_of<Unavailable>([&] { make_nccl_communicator(store, 0, 2, {.timeout = std::chrono::seconds(1)}); });
  EXPECT_TRUE(contains(message, expected_unavailable())) << message;
  EXPECT_TRUE(contains(message, "nccl.cc:")) << message;  // the check macro's location
  // It fails before touching the store: peers are not left waiting for a unique id that never comes.
  EXPECT_EQ(store->num_keys(), 0);
}

TEST(NcclCommunicator, TheRegistryGivesTheSameReason) {
  if (::strata::detail::cuda_device_count() > 0)
    GTEST_SKIP() << "a GPU is visible: tests/cuda/nccl_test.cc runs the backend";
  EXPECT_TRUE(backend_traits("nccl").needs_store);
  expect_error_containing<Unavailable>(
      [&] {
        make_communicator("nccl", {.store = make_in_memory_store(),
                                   .rank = 1,
                                   .size = 2,
                                   .timeout = std::chrono::seconds(1),
                                   .prefix = "dp"});
      },
      {expected_unavailable()});
}

// The in-process group MirroredStrategy over GPUs uses: its device list is checked, and each rank's reason to fail
// (here: no CUDA build, or no GPU) comes back at once, not after the others waited out their connect timeout.
TEST(NcclCommunicator, AnInProcessGroupChecksItsGpusAndSaysWhyItCannotRun) {
  expect_error_containing<InvalidArgument>([] { make_nccl_local_group({}); }, {"at least one GPU"});
  expect_error_containing<InvalidArgument>([] { make_nccl_local_group({0, 1, 0}); },
                                           {"cuda:0 is listed twice", "each rank needs its own GPU"});
  if (::strata::detail::cuda_device_count() > 0)
    GTEST_SKIP() << "a GPU is visible: tests/cuda/mirrored_gpu_test.cc runs the group";
  const auto start = std::chrono::steady_clock::now();
  expect_error_containing<Unavailable>([] { make_nccl_local_group({0, 1}, {.timeout = std::chrono::seconds(20)}); },
                                       {expected_unavailable()});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(NcclBootstrap, ARankWithoutRankZeroTimesOutNamingTheKeyAndThePrefix) {
  auto store = make_in_memory_store();
  expect_error_containing<Timeout>(
      [&] { nccl_detail::fetch_unique_id(*store, "job/dp", 3, 128, std::chrono::milliseconds(50)); },
      {"rank 3", "'job/dp/unique_id'", "prefix 'job/dp'", "50 ms"});
}

TEST(NcclBootstrap, TheUniqueIdArrivesByteForByte) {
  auto store = make_in_memory_store();
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7);  // NULs and high bytes included
  std::string got;
  std::thread waiter([&] { got = nccl_detail::fetch_unique_id(*store, "g", 1, id.size(), std::chrono::seconds(10)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // rank 1 is waiting before rank 0 publishes
  nccl_detail::publish_unique_id(*store, "g", id);
  waiter.join();
  EXPECT_EQ(got, id);
  EXPECT_EQ(nccl_detail::unique_id_key("g"), "g/unique_id");
}

TEST(NcclBootstrap, AValueOfTheWrongSizeIsRefused) {
  auto store = make_in_memory_store();
  store->set("g/unique_id", "not an id");
  expect_error_containing<InvalidArgument>(
      [&] { nccl_detail::fetch_unique_id(*store, "g", 1, 128, std::chrono::seconds(1)); },
      {"'g/unique_id'", "9 bytes", "128"});
}

TEST(NcclBootstrap, APrefixServesOneGroup) {
  auto store = make_in_memory_store();
  nccl_detail::claim_rank(*store, "dp", 0, 2);
  nccl_detail::claim_rank(*store, "dp", 1, 2);
  expect_error_containing<InvalidArgument>([&] { nccl_detail::claim_rank(*store, "dp", 1, 2); },
                                           {"rank 1", "prefix 'dp'", "fresh prefix"});
  nccl_detail::claim_rank(*store, "dp2", 1, 2);  // a fresh prefix is a fresh group
}

TEST(NcclBootstrap, EachRankPicksItsGpu) {
  expect_error_containing<Unavailable>([] { nccl_detail::choose_device(0, -1, 0); }, {"no CUDA device", "rank 0"});
  expect_error_containing<Unavailable>([] { nccl_detail::choose_device(2, 0, 0); }, {"no CUDA device"});
  EXPECT_EQ(nccl_detail::choose_device(0, -1, 8), 0);
  EXPECT_EQ(nccl_detail::choose_device(5, -1, 8), 5);
  EXPECT_EQ(nccl_detail::choose_device(11, -1, 8), 3);  // rank % visible: the second host's fourth GPU
  EXPECT_EQ(nccl_detail::choose_device(11, 6, 8), 6);   // an explicit device wins
  expect_error_containing<InvalidArgument>([] { nccl_detail::choose_device(1, 8, 8); }, {"cuda:8", "8 CUDA devices"});
}

TEST(NcclBootstrap, ABadRankIsRefusedBeforeAnythingElse) {
#ifdef STRATA_WITH_CUDA
  expect_error_containing<InvalidArgument>([] { make_nccl_communicator(make_in_memory_store(), 2, 2); },
                                           {"rank 2 of a group of 2"});
  expect_error_containing<InvalidArgument>([] { make_nccl_communicator(nullptr, 0, 1); }, {"store"});
  expect_error_containing<InvalidArgument>(
      [] { make_nccl_communicator(make_in_memory_store(), 0, 1, {.connect_timeout = std::chrono::milliseconds(-1)}); },
      {"connect timeout", "-1 ms"});
#else
  GTEST_SKIP() << "without CUDA the factory refuses every call as Unavailable";
#endif
}

}  // namespace
}  // namespace strata::comm
