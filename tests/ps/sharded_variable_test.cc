// A variable sharded over two parameter servers on 127.0.0.1: shards and placement as the partitioner and
// TensorFlow's "div" split say, pull / lookup / push / push_rows equal the same operations on one unsharded variable
// (bit for bit), and re-sharding a pulled value keeps it.
#include <gtest/gtest.h>

#include "strata/error.h"
#include "strata/optim/optimizers.h"
#include "strata/ps/sharded_variable.h"
#include "strata/variable.h"
#include "test_util.h"

namespace strata::ps {
namespace {

struct TwoServers {
  ParameterServer a, b;
  std::vector<std::shared_ptr<ParameterServerClient>> clients;
  TwoServers() {
    a.start("127.0.0.1:0");
    b.start("127.0.0.1:0");
    for (ParameterServer* s : {&a, &b})
      clients.push_back(std::make_shared<ParameterServerClient>("127.0.0.1:" + std::to_string(s->port())));
  }
};

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(ShardedVariableTest, ShardsFollowThePartitionerAndActAsOneVariable) {
  TwoServers ps;
  const Tensor initial = test::random_tensor({13, 4}, 3);
  const OptimizerSpec adam{.name = "adam", .learning_rate = 0.01};
  ShardedVariable v("table", initial, FixedShardsPartitioner(5), ps.clients, adam);
  EXPECT_EQ(v.num_shards(), 5);
  EXPECT_EQ(v.shard_rows(), (std::vector<int64_t>{3, 3, 3, 2, 2}));
  EXPECT_EQ(v.shard_name(3), "table/part_3");
  EXPECT_EQ(v.shard_server(3), 1);  // round-robin over the 2 servers
  EXPECT_EQ(values(ps.clients[1]->pull("table/part_3")), values(initial.slice(9, 11)));
  EXPECT_EQ(values(v.pull()), values(initial));

  // The same updates on one unsharded variable, locally.
  Variable local(initial.clone(), true, "table");
  optim::Adam local_adam({.learning_rate = 0.01f});
  const Tensor dense = test::random_tensor({13, 4}, 4);
  v.push(dense, "step:1");
  local_adam.apply_gradients({dense}, {local});
  const std::vector<int64_t> rows = {12, 0, 5, 12};  // spread over shards 4, 0, 1; a repeated row adds
  const Tensor rows_grad = test::random_tensor({4, 4}, 5);
  v.push_rows(rows, rows_grad, "step:2");
  Tensor scattered = Tensor::zeros({13, 4});
  for (size_t k = 0; k < rows.size(); ++k) {
    for (int c = 0; c < 4; ++c) scattered.data<float>()[rows[k] * 4 + c] += rows_grad.data<float>()[k * 4 + c];
  }
  // Shards not touched by the sparse push are not updated at all (no step for them), unlike one dense variable
  // whose Adam moments all decay: compare the touched shards' rows with the local update of the whole.
  local_adam.apply_gradients({scattered}, {local});
  const Tensor got = v.pull(), want = local.value();
  for (int64_t r : {0, 1, 2, 3, 4, 5, 11, 12}) {  // shards 0, 1 and 4
    for (int c = 0; c < 4; ++c) EXPECT_EQ(got.data<float>()[r * 4 + c], want.data<float>()[r * 4 + c]) << r;
  }
  const Tensor looked = v.lookup({12, 0, 5, 7});
  EXPECT_EQ(looked.shape(), (Shape{4, 4}));
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(looked.data<float>()[c], got.data<float>()[12 * 4 + c]);
    EXPECT_EQ(looked.data<float>()[3 * 4 + c], got.data<float>()[7 * 4 + c]);
  }

  // Re-sharded: the pulled value as 2 shards under another name reads the same.
  ShardedVariable two("table_resharded", got, MinSizePartitioner({.min_shard_bytes = 64, .max_shards = 2}),
                      ps.clients, adam);
  EXPECT_EQ(two.num_shards(), 2);
  EXPECT_EQ(values(two.pull()), values(got));
}

TEST(ShardedVariableTest, BadUseIsAClearError) {
  TwoServers ps;
  ShardedVariable v("w", Tensor::zeros({4, 2}), FixedShardsPartitioner(2), ps.clients, {.name = "sgd"});
  EXPECT_THROW(v.lookup({4}), InvalidArgument);
  EXPECT_THROW(v.push(Tensor::zeros({4})), InvalidArgument);
  EXPECT_THROW(v.push_rows({1}, Tensor::zeros({2, 2})), InvalidArgument);
  EXPECT_THROW(ShardedVariable("x", Tensor::zeros({2}), FixedShardsPartitioner(1), {}, {.name = "sgd"}),
               InvalidArgument);
}

TEST(ShardedVariableTest, AWorkersHandleOnExistingShardsCreatesNothing) {
  TwoServers ps;
  const Tensor initial = test::random_tensor({5, 3}, 7);
  const FixedShardsPartitioner partitioner(2);
  ShardedVariable chief("w", initial, partitioner, ps.clients, {.name = "sgd", .learning_rate = 1.0});
  const ShardedVariable worker = ShardedVariable::existing("w", {5, 3}, partitioner, ps.clients);
  EXPECT_EQ(worker.shard_rows(), chief.shard_rows());
  EXPECT_EQ(values(worker.pull()), values(initial));
  const Tensor grad = test::random_tensor({5, 3}, 8);
  worker.push(grad, "step:1");
  std::vector<float> want = values(initial);  // SGD, learning rate 1
  for (size_t i = 0; i < want.size(); ++i) want[i] -= values(grad)[i];
  EXPECT_EQ(values(chief.pull()), want);
  // Many variables at once (two handles on one variable would be one variable: a step's second push is a repeat).
  ShardedVariable other("v", Tensor::zeros({5, 3}), partitioner, ps.clients, {.name = "sgd", .learning_rate = 1.0});
  push_all({worker, other}, {grad, grad}, "step:2");
  const std::vector<Tensor> both = pull_all({chief, other});
  for (size_t i = 0; i < want.size(); ++i) want[i] -= values(grad)[i];
  EXPECT_EQ(values(both[0]), want);
  std::vector<float> minus = values(grad);
  for (float& g : minus) g = -g;
  EXPECT_EQ(values(both[1]), minus);
  EXPECT_THROW(push_all({worker}, {}), InvalidArgument);
  // A handle on shards nobody created names the missing shard at its first use.
  const ShardedVariable missing = ShardedVariable::existing("nobody", {4}, partitioner, ps.clients);
  EXPECT_NE(test::message_of<InvalidArgument>([&] { missing.pull(); }).find("nobody/part_"), std::string::npos);
}

}  // namespace
}  // namespace strata::ps
