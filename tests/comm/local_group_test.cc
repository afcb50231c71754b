// Sub-groups of the local backend (new_group, as torch.distributed.new_group): a subset's communicators, ranks
// outside getting nullptr, results over the members only, nesting, disjoint groups made in different orders,
// independence from the parent, bad rank lists, and a sub-group's own timeout. Ranks run as std::threads.
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "strata/comm/local.h"
#include "comm/comm_test_util.h"
#include "test_util.h"

namespace strata::comm {
namespace {

using test::run_ranks;
using test::contains;

using test::message_of;
using test::Group;
using std::chrono::milliseconds;

TEST(LocalGroupTest, SubsetReducesOverItsMembersOnly) {
  const Group world = make_local_group(4);
  std::vector<std::shared_ptr<Communicator>> sub(4);
  std::vector<Tensor> t(4), world_t(4), gathered(4);
  for (int r = 0; r < 4; ++r) {
    t[r] = Tensor::full({5}, 1.0 + r);  // 1, 2, 3, 4
    world_t[r] = Tensor::full({3}, 10.0 * r);
    gathered[r] = Tensor::zeros({10});
  }
  run_ranks(world, [&](int r, Communicator& c) {
    sub[r] = c.new_group({2, 0});         // unsorted on purpose: ranks are sorted, so world 0 -> 0, world 2 -> 1
    auto w = c.all_reduce({world_t[r]});  // the parent runs beside the sub-group
    if (sub[r]) {
      sub[r]->all_reduce({t[r]})->wait();
      sub[r]->all_gather(t[r], gathered[r])->wait();
    }
    w->wait();
  });
  for (int r : {1, 3}) EXPECT_EQ(sub[r], nullptr) << r;
  for (int r : {0, 2}) {
    ASSERT_NE(sub[r], nullptr);
    EXPECT_EQ(sub[r]->size(), 2);
    EXPECT_EQ(sub[r]->rank(), r / 2);
    EXPECT_EQ(sub[r]->backend(), "local");
    EXPECT_EQ(t[r].to_vector<float>(), std::vector<float>(5, 4.0f)) << r;  // 1 + 3
    EXPECT_EQ(gathered[r].to_vector<float>(), std::vector<float>(10, 4.0f)) << r;
  }
  for (int r : {1, 3}) EXPECT_EQ(t[r].to_vector<float>(), std::vector<float>(5, 1.0f + r)) << r;
  for (int r = 0; r < 4; ++r) EXPECT_EQ(world_t[r].to_vector<float>(), std::vector<float>(3, 60.0f)) << r;
}

TEST(LocalGroupTest, NestedGroupsAndEveryCollective) {
  // world 5 -> {1, 2, 3, 4} (data parallel) -> its ranks {0, 2} = world {1, 3} (tensor parallel).
  const Group world = make_local_group(5);
  std::vector<Tensor> a(5), in(5), out(5), p2p(5);
  std::vector<int> inner_rank(5, -1), inner_size(5, 0);
  for (int r = 0; r < 5; ++r) {
    a[r] = Tensor::full({3}, static_cast<double>(r), DType::kInt64);
    in[r] = Tensor::full({4}, static_cast<double>(r), DType::kBFloat16);  // two rows of 2 per member
    out[r] = Tensor::zeros({2}, DType::kBFloat16);
    p2p[r] = Tensor::zeros({1});
  }
  run_ranks(world, [&](int r, Communicator& c) {
    auto outer = c.new_group({1, 2, 3, 4});
    if (!outer) return;
    auto inner = outer->new_group({0, 2});
    if (!inner) return;
    inner_rank[r] = inner->rank();
    inner_size[r] = inner->size();
    inner->all_reduce({a[r]}, ReduceOp::kSum)->wait();
    inner->reduce_scatter(in[r], out[r], {.op = ReduceOp::kMean})->wait();
    if (inner->rank() == 0) {
      inner->send({Tensor::full({1}, 99.0)}, 1, 2)->wait();
    } else {
      inner->recv({p2p[r]}, 0, 2)->wait();
    }
    inner->barrier();
  });
  EXPECT_EQ(inner_rank, (std::vector<int>{-1, 0, -1, 1, -1}));
  EXPECT_EQ(inner_size, (std::vector<int>{0, 2, 0, 2, 0}));
  for (int r : {1, 3}) {
    EXPECT_EQ(a[r].to_vector<int64_t>(), std::vector<int64_t>(3, 4)) << r;   // 1 + 3
    EXPECT_EQ(out[r].to_vector<float>(), std::vector<float>(2, 2.0f)) << r;  // (1 + 3) / 2
  }
  EXPECT_EQ(p2p[3].item<float>(), 99.0f);
  EXPECT_EQ(a[2].to_vector<int64_t>(), std::vector<int64_t>(3, 2));
}

TEST(LocalGroupTest, DisjointGroupsMadeByTheirMembersInAnyOrder) {
  const Group world = make_local_group(4);
  std::vector<Tensor> t(4);
  for (int r = 0; r < 4; ++r) t[r] = Tensor::full({2}, 1.0 + r);
  run_ranks(world, [&](int r, Communicator& c) {
    // Ranks 0, 1 make only their pair; ranks 2, 3 also name the other pair (getting nullptr), in either order.
    std::shared_ptr<Communicator> mine;
    if (r < 2) {
      mine = c.new_group({0, 1});
    } else if (r == 2) {
      EXPECT_EQ(c.new_group({0, 1}), nullptr);
      mine = c.new_group({2, 3});
    } else {
      mine = c.new_group({2, 3});
      EXPECT_EQ(c.new_group({0, 1}), nullptr);
    }
    mine->all_reduce({t[r]}, ReduceOp::kMax)->wait();
    // A second group of the same ranks is a new group, not the first again.
    auto again = c.new_group(r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3});
    EXPECT_NE(again, mine);
    again->all_reduce({t[r]})->wait();
  });
  EXPECT_EQ(t[0].to_vector<float>(), std::vector<float>(2, 4.0f));  // max(1, 2) summed twice
  EXPECT_EQ(t[1].to_vector<float>(), std::vector<float>(2, 4.0f));
  EXPECT_EQ(t[2].to_vector<float>(), std::vector<float>(2, 8.0f));
  EXPECT_EQ(t[3].to_vector<float>(), std::vector<float>(2, 8.0f));
}

TEST(LocalGroupTest, BadRankListsAndAGroupOfOne) {
  const Group world = make_local_group(3);
  std::string m = message_of<InvalidArgument>([&] { world[0]->new_group({0, 3}); });
  EXPECT_TRUE(contains(m, "new_group on rank 0: ranks [0, 3] are not all ranks of local group of 3")) << m;
  m = message_of<InvalidArgument>([&] { world[1]->new_group({1, 1}); });
  EXPECT_TRUE(contains(m, "new_group on rank 1: ranks [1, 1] name a rank twice")) << m;
  m = message_of<InvalidArgument>([&] { world[2]->new_group({}); });
  EXPECT_TRUE(contains(m, "new_group on rank 2: no ranks given")) << m;
  auto alone = world[1]->new_group({1});
  ASSERT_NE(alone, nullptr);
  EXPECT_EQ(alone->size(), 1);
  Tensor t = Tensor::full({2}, 5.0);
  alone->all_reduce({t}, ReduceOp::kMean)->wait();
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(2, 5.0f));
}

TEST(LocalGroupTest, ASubGroupTimesOutAloneNamingItsRank) {
  const Group world = make_local_group(3, {.timeout = std::chrono::seconds(20)});
  std::string message;
  std::vector<Tensor> t = {Tensor::ones({2}), Tensor::ones({2}), Tensor::ones({2})};
  run_ranks(world, [&](int r, Communicator& c) {
    auto sub = c.new_group({0, 1});
    if (r == 0) {  // rank 1 never comes
      message = message_of<Timeout>([&] { sub->all_reduce({t[0]}, {.timeout = milliseconds(200)})->wait(); });
    }
    // The parent is not aborted by its sub-group's timeout.
    c.all_reduce({t[r]})->wait();
  });
  EXPECT_TRUE(contains(message,
                       "local group of 2 (ranks 0, 1 of local group of 3): all_reduce #1 on rank 0 timed out "
                       "after 200 ms at step 'arrive': "
                       "rank 1 had not arrived; rank 1 has issued no collective"))
      << message;
  EXPECT_EQ(t[2].to_vector<float>(), std::vector<float>(2, 3.0f));
}

}  // namespace
}  // namespace strata::comm
