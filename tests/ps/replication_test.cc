// Shard replication between ps tasks (src/ps/replication.h), in process: a primary forwards every push to its
// backup; when the primary is stopped, linked clients have the backup take over and every push is applied exactly
// once (a step re-sent across the takeover is dropped); a restarted ps copies the shards back and becomes their
// backup; both ps restored from a checkpoint are paired again by Rebackup; a push's learning rate and an assign reach
// the backup; and the value always equals the same optimizer applied locally to every acknowledged push.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "strata/optim/optimizers.h"
#include "strata/ps/server.h"
#include "strata/variable.h"
#include "io/io_test_util.h"
#include "test_util.h"

namespace strata::ps {
namespace {

using namespace std::chrono_literals;

// Two ps tasks on ports the OS picked, each told the other's address.
struct TwoPs {
  std::vector<int> ports;
  std::vector<std::unique_ptr<ParameterServer>> servers;
  std::vector<std::string> addresses() const {
    return {"127.0.0.1:" + std::to_string(ports[0]), "127.0.0.1:" + std::to_string(ports[1])};
  }
  std::string checkpoints;  // "": none; else ps i checkpoints under <checkpoints>/ps-<i>
  void start(size_t index, int64_t restore_checkpoint = 0) {
    servers[index] = std::make_unique<ParameterServer>();
    servers[index]->start(addresses()[index],
                          {.checkpoint_directory = checkpoints.empty() ? "" : checkpoints + "/ps-" + std::to_string(index),
                           .restore_checkpoint = restore_checkpoint,
                           .replicas = addresses(),
                           .replica_index = static_cast<int64_t>(index),
                           .replica_timeout = 5s});
  }
  // Started on ports the OS picked; with `restore_checkpoint`, both from that checkpoint under `checkpoint_root`, ps:0
  // first (ps:1 then finds it up, holding its restored shards).
  explicit TwoPs(std::string checkpoint_root = "", int64_t restore_checkpoint = 0)
      : ports{test::free_port(), test::free_port()}, servers(2), checkpoints(std::move(checkpoint_root)) {
    start(0, restore_checkpoint);
    start(1, restore_checkpoint);
  }
};

std::vector<std::shared_ptr<ParameterServerClient>> linked_clients(const std::vector<std::string>& addresses) {
  std::vector<std::shared_ptr<ParameterServerClient>> clients;
  for (const std::string& a : addresses) clients.push_back(std::make_shared<ParameterServerClient>(a, 10s, "worker:0"));
  ParameterServerClient::link_replicas(clients);
  return clients;
}

TEST(ReplicationTest, ABackupTakesOverWithEveryAcknowledgedPushAndARestartedPsBecomesItsBackup) {
  TwoPs ps;
  const auto clients = linked_clients(ps.addresses());
  const Tensor initial = test::random_tensor({5, 3}, 1);
  const OptimizerSpec adam{.name = "adam", .learning_rate = 0.01};
  ASSERT_TRUE(clients[0]->create("w", initial, adam));  // primary ps:0, backup ps:1

  // The reference: the same optimizer applied locally to every push that was acknowledged.
  Variable reference(initial.clone(), true, "w");
  optim::Adam local(optim::AdamOptions{.learning_rate = 0.01f});
  const auto push = [&](int step) {
    const Tensor grad = test::random_tensor({5, 3}, 100 + step);
    const bool applied = clients[0]->push("w", grad, "step:" + std::to_string(step));
    if (applied) local.apply_gradients({grad}, {reference});
    return applied;
  };
  for (int step = 1; step <= 5; ++step) ASSERT_TRUE(push(step));
  EXPECT_EQ(ps.servers[0]->pushes_applied(), 5);
  EXPECT_EQ(ps.servers[1]->pushes_replicated(), 5);
  EXPECT_EQ(clients[0]->stats().shards, 1);
  EXPECT_EQ(clients[1]->stats().backups, 1);

  // ps:0 is lost: the next push has ps:1 take over, and a step re-sent across the takeover is dropped.
  ps.servers[0]->stop();
  ASSERT_TRUE(push(6));
  EXPECT_FALSE(push(5));
  EXPECT_EQ(ps.servers[1]->takeovers(), 1);
  test::expect_near(clients[0]->pull("w"), reference.value(), 0.0);

  // ps:0 comes back on its address: it copies the shard from ps:1 before it listens and becomes its backup.
  ps.start(0);
  EXPECT_EQ(ps.servers[0]->shards_resynced(), 1);
  ASSERT_TRUE(push(7));
  EXPECT_EQ(ps.servers[0]->pushes_replicated(), 1);
  EXPECT_EQ(clients[0]->stats().backups, 1);

  // Now ps:1 is lost: ps:0 takes the shard back, with every push.
  ps.servers[1]->stop();
  ASSERT_TRUE(push(8));
  EXPECT_FALSE(push(7));
  EXPECT_EQ(ps.servers[0]->takeovers(), 1);
  test::expect_near(clients[1]->pull("w"), reference.value(), 0.0);  // any linked client finds the primary
}

// The backup applies a forwarded push at the rate it names and keeps it, and takes an assign with the primary's
// optimizer state kept: taken over, it goes on exactly as the primary would have.
TEST(ReplicationTest, APushsLearningRateAndAnAssignReachTheBackup) {
  TwoPs ps;
  const auto clients = linked_clients(ps.addresses());
  const Tensor initial = test::random_tensor({5, 3}, 1);
  ASSERT_TRUE(clients[0]->create("w", initial, {.name = "adam", .learning_rate = 0.01}));  // primary ps:0
  Variable reference(initial.clone(), true, "w");
  optim::Adam local(optim::AdamOptions{.learning_rate = 0.01f});
  const auto push = [&](int step, double rate) {
    const Tensor grad = test::random_tensor({5, 3}, 100 + step);
    ASSERT_TRUE(clients[0]->push("w", grad, "step:" + std::to_string(step), {}, rate));
    if (rate > 0) local.set_learning_rate(static_cast<float>(rate));
    local.apply_gradients({grad}, {reference});
  };
  push(1, 0);
  push(2, 0.002);
  const Tensor best = test::random_tensor({5, 3}, 9);
  clients[0]->assign("w", best, {.name = "adam", .learning_rate = 0.01});
  reference.assign(best);
  EXPECT_EQ(ps.servers[1]->pushes_replicated(), 2);
  ps.servers[0]->stop();
  push(3, 0);  // taken over by ps:1: at the kept 0.002, Adam's third step from the assigned value
  EXPECT_EQ(ps.servers[1]->takeovers(), 1);
  EXPECT_EQ(clients[0]->pull("w").to_vector<float>(), reference.value().to_vector<float>());
}

TEST(ReplicationTest, ACallToABackupIsSentToThePrimaryAndAPrimaryWithoutItsBackupGoesOnAlone) {
  TwoPs ps;
  // A client that is not linked reaches the backup directly: it is told where the primary is.
  const auto linked = linked_clients(ps.addresses());
  ASSERT_TRUE(linked[1]->create("b", Tensor::full({4}, 1.0), {.name = "sgd", .learning_rate = 1.0}));  // primary ps:1
  ParameterServerClient direct(ps.addresses()[0], 5s);
  test::expect_error_containing<InvalidArgument>([&] { direct.pull("b"); }, {"is served by ps:1 now"});

  // The backup lost: the primary answers alone, and the push counts once.
  ps.servers[0]->stop();
  EXPECT_TRUE(linked[1]->push("b", Tensor::full({4}, 1.0), "step:1"));
  EXPECT_EQ(linked[1]->pull("b").to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(ps.servers[1]->pushes_applied(), 1);
  EXPECT_EQ(ps.servers[1]->takeovers(), 0);
}

// A job restarted whole: both ps come back from the checkpoint at once (neither finds the other's live copies), each
// with its own primaries, fenced; restored (the fence lifted) and told to back each other up again, every shard is on
// two tasks once more, and a ps lost afterwards is taken over with every push.
TEST(ReplicationTest, AfterBothPsRestoreACheckpointRebackupPairsEveryShardAgain) {
  test::ScratchDir scratch;
  const OptimizerSpec sgd{.name = "sgd", .learning_rate = 1.0};
  {
    TwoPs before(scratch.path());
    const auto clients = linked_clients(before.addresses());
    ASSERT_TRUE(clients[0]->create("a", Tensor::full({2}, 1.0), sgd));  // primary ps:0
    ASSERT_TRUE(clients[1]->create("b", Tensor::full({2}, 1.0), sgd));  // primary ps:1
    ASSERT_TRUE(clients[0]->push("a", Tensor::full({2}, 0.5), "step:1"));
    EXPECT_EQ(clients[0]->save(1), 1);  // its primary alone
    EXPECT_EQ(clients[1]->save(1), 1);
  }
  // Both come back from checkpoint 1, fenced: ps:0 finds nobody to copy from and loads its own, ps:1 finds ps:0 up
  // and copies the backups it is owed (then, having copies, loads nothing).
  TwoPs after(scratch.path(), 1);
  const auto clients = linked_clients(after.addresses());
  for (const auto& c : clients) c->restore(1);
  for (const auto& c : clients) c->rebackup();
  const auto s0 = clients[0]->stats(), s1 = clients[1]->stats();
  EXPECT_EQ(s0.fenced_at, 0);
  EXPECT_EQ(s1.fenced_at, 0);
  EXPECT_EQ(s0.shards - s0.backups, 1);  // "a"
  EXPECT_EQ(s0.backups, 1);              // of "b"
  EXPECT_EQ(s1.shards - s1.backups, 1);
  EXPECT_EQ(s1.backups, 1);
  EXPECT_EQ(clients[0]->pull("a").to_vector<float>(), std::vector<float>(2, 0.5f));
  // Paired again: ps:0 lost, "a" is served by its backup with the push made after the restore.
  ASSERT_TRUE(clients[0]->push("a", Tensor::full({2}, 0.5), "step:2"));
  after.servers[0]->stop();
  EXPECT_EQ(clients[1]->pull("a").to_vector<float>(), std::vector<float>(2, 0.0f));
}

}  // namespace
}  // namespace strata::ps
