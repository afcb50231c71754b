// The nccl backend on a GPU (strata/comm/nccl.h): a single-rank group bootstrapped through an in-memory store (one
// GPU cannot hold two NCCL ranks), whose collectives leave GPU tensors equal to the input, refuse host tensors naming
// the device, and are ordered with strata's stream (a kernel queued right after reads the result, with no wait).
// The multi-rank paths run only on a machine with several GPUs. Thread-safety: test-thread only.
#include "strata/comm/nccl.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/kernels.h"
#include "strata/comm/backends.h"
#include "strata/error.h"

namespace strata::comm {
namespace {

using testing::gpu;

std::shared_ptr<Communicator> single_rank(const std::string& prefix = "nccl") {
  return make_nccl_communicator(make_in_memory_store(), 0, 1, {.timeout = std::chrono::seconds(60), .prefix = prefix});
}

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to(DType::kFloat32).to_vector<float>(); }

TEST(NcclGpuTest, ASingleRankGroupConnects) {
  STRATA_REQUIRE_GPU();
  auto comm = single_rank();
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  auto by_name = make_communicator("nccl", {.store = make_in_memory_store(), .rank = 0, .size = 1, .prefix = "dp"});
  EXPECT_EQ(by_name->backend(), "nccl");
}

TEST(NcclGpuTest, AllReduceOfOneRankIsTheInputForEveryOpAndDtype) {
  STRATA_REQUIRE_GPU();
  auto comm = single_rank();
  const Tensor host = testing::random_host({1000}, 7, -4.0f, 4.0f);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
    const Tensor input = host.to(dtype);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
      Tensor a = input.to(gpu());
      Tensor b = input.to(gpu());
      comm->all_reduce({a, b}, {.op = op, .timeout = std::chrono::seconds(30)})->wait();
      EXPECT_EQ(values(a), values(input)) << dtype_name(dtype) << " " << to_string(op);
      EXPECT_EQ(values(b), values(input)) << dtype_name(dtype) << " " << to_string(op);
    }
  }
}

TEST(NcclGpuTest, BroadcastAllGatherReduceScatterAndBarrierOfOneRank) {
  STRATA_REQUIRE_GPU();
  auto comm = single_rank();
  const Tensor host = testing::random_host({3, 4}, 11);
  Tensor x = host.to(gpu());
  comm->broadcast({x}, 0)->wait();
  EXPECT_EQ(values(x), values(host));

  Tensor gathered = Tensor::zeros({3, 4}, DType::kFloat32, gpu());
  comm->all_gather(host.to(gpu()), gathered)->wait();
  EXPECT_EQ(values(gathered), values(host));

  Tensor scattered = Tensor::zeros({3, 4}, DType::kFloat32, gpu());
  comm->reduce_scatter(host.to(gpu()), scattered, {.op = ReduceOp::kSum})->wait();
  EXPECT_EQ(values(scattered), values(host));

  comm->barrier();
  comm->barrier({.timeout = std::chrono::seconds(10)});
  EXPECT_THROW(comm->broadcast({x}, 1), InvalidArgument);  // no rank 1
  EXPECT_THROW(comm->send({x}, 0), InvalidArgument);       // no peer in a group of one
}

TEST(NcclGpuTest, AHostTensorIsRefusedNamingItsDevice) {
  STRATA_REQUIRE_GPU();
  auto comm = single_rank();
  try {
    comm->all_reduce({testing::random_host({4}, 1)});
    FAIL() << "a host tensor must be refused";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("on cpu"), std::string::npos) << message;
    EXPECT_NE(message.find("nccl collectives take GPU tensors; use gloo for host tensors"), std::string::npos)
        << message;
  }
}

// A fresh output is written by the collective on NCCL's stream; a kernel queued at once on strata's stream must
// read the collective's result, not the zeros (large, so that an unordered read would see them).
TEST(NcclGpuTest, TheResultIsOrderedWithStrataStream) {
  STRATA_REQUIRE_GPU();
  auto comm = single_rank();
  const Tensor host = testing::random_host({1 << 22}, 3);
  const Tensor input = kernels::add(host.to(gpu()), host.to(gpu()));  // written by a kernel just before
  Tensor gathered = Tensor::zeros({1 << 22}, DType::kFloat32, gpu());
  auto work = comm->all_gather(input, gathered);
  const Tensor after = kernels::add(gathered, gathered);  // no wait: the stream orders it
  const std::vector<float> want = values(kernels::add(kernels::add(host, host), kernels::add(host, host)));
  EXPECT_EQ(values(after), want);
  work->wait();

  Tensor reduced = kernels::add(host.to(gpu()), host.to(gpu()));
  auto reduce = comm->all_reduce({reduced}, ReduceOp::kSum);
  EXPECT_EQ(values(kernels::add(reduced, reduced)), want);
  reduce->wait();
}

TEST(NcclGpuTest, WaitWithATimeoutReturns) {
  STRATA_REQUIRE_GPU();
  auto comm = single_rank();
  Tensor x = testing::random_host({1 << 20}, 5).to(gpu());
  auto work = comm->all_reduce({x}, ReduceOp::kSum);
  work->wait(std::chrono::seconds(30));
  EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(work->exception(), nullptr);
  work->wait();  // again: done
}

TEST(NcclGpuTest, ASubGroupOfOneAndAbort) {
  STRATA_REQUIRE_GPU();
  auto comm = single_rank();
  auto sub = comm->new_group({0});
  ASSERT_NE(sub, nullptr);
  Tensor x = testing::random_host({16}, 9).to(gpu());
  const std::vector<float> before = values(x);
  sub->all_reduce({x}, ReduceOp::kMax)->wait();
  EXPECT_EQ(values(x), before);

  comm->abort("replica 3 is gone");
  try {
    comm->all_reduce({x})->wait();
    FAIL() << "an aborted communicator must refuse collectives";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("replica 3 is gone"), std::string::npos) << e.what();
  }
  sub->all_reduce({x})->wait();  // the sub-group is a group of its own
}

}  // namespace
}  // namespace strata::comm
