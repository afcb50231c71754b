// ps::load_ps_checkpoint: a parameter-server job's committed checkpoint read back into a fresh model, each
// variable's shards reassembled from whichever ps holds them (with backups, each shard saved by its primary alone),
// and the clear errors when there is no committed checkpoint or it is not the model's.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/io_test_util.h"
#include "ps/ps_checkpoint.h"
#include "strata/error.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/ps/partitioner.h"
#include "strata/ps/remote_trainer.h"
#include "strata/ps/server.h"
#include "strata/random.h"
#include "strata/train/model.h"
#include "test_util.h"

namespace strata::ps {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<Sequential> model_of(uint64_t seed, int64_t width = 5) {
  manual_seed(seed);
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Dense(width, "relu"), nn::Dense(2)});
  model->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::SGD());
  model->build_for({1, 3});
  return model;
}

TEST(PsCheckpointLoadTest, AFreshModelTakesTheCommittedCheckpointsShardsReassembled) {
  test::ScratchDir root;
  const std::vector<std::string> addresses = {"127.0.0.1:" + std::to_string(test::free_port()),
                                              "127.0.0.1:" + std::to_string(test::free_port())};
  ParameterServer servers[2];
  std::vector<std::shared_ptr<ParameterServerClient>> clients;
  for (int i = 0; i < 2; ++i) {
    servers[i].start(addresses[static_cast<size_t>(i)],
                     {.checkpoint_directory = detail::ps_checkpoint_directory(root.path(), i).string(),
                      .replicas = addresses,
                      .replica_index = i});
  }
  for (const std::string& a : addresses) clients.push_back(std::make_shared<ParameterServerClient>(a, 10s));
  ParameterServerClient::link_replicas(clients);

  // Every variable in 2 shards (the kernels [3, 5] as rows 2 + 1, the biases [5] as 3 + 2), one on each ps, each
  // backed up on the other; then trained a little so the values are the ps's own.
  const auto trained = model_of(1);
  const std::vector<ShardedVariable> vars =
      create_model_variables(*trained, FixedShardsPartitioner(2), clients, {.name = "sgd", .learning_rate = 0.5});
  for (size_t k = 0; k < vars.size(); ++k) vars[k].push(test::random_tensor(vars[k].shape(), 10 + k), "step:1");
  detail::PsCheckpointManifest manifest{.checkpoint = 1, .step = 1};
  for (const auto& c : clients) manifest.ps_shards.push_back(c->save(1));
  EXPECT_EQ(manifest.ps_shards, (std::vector<int64_t>{4, 4}));  // each ps its 4 primaries (their backups are copies)

  // Before the manifest is committed there is no checkpoint to read.
  const auto fresh = model_of(2);
  test::expect_error_containing<InvalidArgument>([&] { load_ps_checkpoint(*fresh, root.path()); },
                                                 {"holds no committed parameter-server checkpoint"});
  detail::commit_ps_manifest(root.path(), manifest);
  const PsCheckpointLoaded loaded = load_ps_checkpoint(*fresh, root.path());
  EXPECT_EQ(loaded.checkpoint, 1);
  EXPECT_EQ(loaded.step, 1);
  const std::vector<Tensor> want = pull_all(vars);
  const std::vector<Variable> got = fresh->trainable_variables();
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) test::expect_near(got[k].value(), want[k], 0.0f);

  // Another model is named, variable and shapes.
  const auto other = model_of(3, /*width=*/4);
  test::expect_error_containing<InvalidArgument>([&] { load_ps_checkpoint(*other, root.path()); },
                                                 {"model/var_0 has shape [3, 5]", "[3, 4]"});
}

}  // namespace
}  // namespace strata::ps
