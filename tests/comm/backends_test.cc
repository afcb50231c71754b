// The backend registry: the built-in backends by name, a group made through it (gloo ranks as threads), a backend a
// program registers, and clear errors for an unknown name, a local group of more than one and nccl without a GPU.
#include "strata/comm/backends.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "core/device_memory.h"
#include "strata/comm/local.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::comm {
namespace {

using namespace std::chrono_literals;

TEST(BackendsTest, TheBuiltInBackendsAreRegisteredWithTheirTraits) {
  const std::vector<std::string> names = backend_names();
  for (const char* name : {"gloo", "local", "mpi", "nccl"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  EXPECT_TRUE(backend_traits("gloo").needs_store);
  EXPECT_TRUE(backend_traits("gloo").can_rebuild);
  EXPECT_FALSE(backend_traits("mpi").needs_store);
  EXPECT_FALSE(backend_traits("mpi").can_rebuild);
}

TEST(BackendsTest, AGlooGroupMadeByNameReduces) {
  const auto store = make_in_memory_store(10s);
  std::vector<float> got(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        auto comm = make_communicator("gloo", {.store = store, .rank = r, .size = 2, .timeout = 10s, .prefix = "t"});
        Tensor value = Tensor::full({1}, static_cast<float>(r + 1));
        comm->all_reduce({value}, ReduceOp::kSum)->wait();
        got[static_cast<size_t>(r)] = value.item<float>();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(errors, std::vector<std::string>(2));
  EXPECT_EQ(got, (std::vector<float>{3.0f, 3.0f}));
}

TEST(BackendsTest, ARegisteredBackendIsMadeByItsNameWithTheArguments) {
  std::atomic<int> made{0};
  register_backend(
      "test_counting",
      [&](const GroupArgs& args) {
        EXPECT_EQ(args.prefix, "p");
        ++made;
        return make_local_group(1)[0];
      },
      {.needs_store = false, .can_rebuild = false});
  auto comm = make_communicator("test_counting", {.prefix = "p"});
  EXPECT_EQ(made.load(), 1);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_FALSE(backend_traits("test_counting").can_rebuild);
}

TEST(BackendsTest, BadNamesAndGroupsAreClearErrors) {
  const std::string unknown = test::message_of<InvalidArgument>([] { make_communicator("ucx", {}); });
  EXPECT_NE(unknown.find("unknown communicator backend 'ucx'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("gloo"), std::string::npos) << unknown;
  EXPECT_NE(test::message_of<InvalidArgument>([] { make_communicator("local", {.rank = 0, .size = 2}); })
                .find("group of one"),
            std::string::npos);
  EXPECT_NE(test::message_of<InvalidArgument>([] { make_communicator("gloo", {.rank = 0, .size = 2}); })
                .find("needs a store"),
            std::string::npos);
  EXPECT_NE(test::message_of<InvalidArgument>([] { make_communicator("local", {.rank = 3, .size = 2}); })
                .find("rank 3 of a group of 2"),
            std::string::npos);
  // Without CUDA or a GPU (with one, tests/cuda/nccl_test.cc runs nccl).
  if (::strata::detail::cuda_device_count() == 0) {
    test::message_of<Unavailable>([] { make_communicator("nccl", {.store = make_in_memory_store(), .size = 1}); });
  }
  EXPECT_NE(test::message_of<InvalidArgument>([] { register_backend("", [](const GroupArgs&) { return nullptr; }); })
                .find("empty"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::comm
