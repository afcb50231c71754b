// A variable split over the parameter servers (tf.distribute.experimental.ShardedVariable's role): a partitioner
// decides the shard count along axis 0, the rows follow TensorFlow's "div" split, shard i lives on server
// i % servers as "<name>/part_<i>", and the variable still reads and updates as one tensor.
//
//   std::vector<std::shared_ptr<ps::ParameterServerClient>> servers = {ps0, ps1};
//   ps::ShardedVariable table("embedding", initial, ps::FixedShardsPartitioner(4), servers, {.name = "adagrad"});
//   Tensor rows = table.lookup({7, 123456});        // each row from its shard, the shards asked in parallel
//   table.push_rows({7, 123456}, grads, "worker:0/step:3");
//   Tensor whole = table.pull();                     // every shard, in parallel, concatenated
//
// Re-sharding: a value pulled from one ShardedVariable creates another with a different partitioner (e.g. a
// checkpoint saved with 4 shards restored with 2).
// Thread-safety: const methods may be called from many threads at once (the clients are thread-safe).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/ps/partitioner.h"
#include "strata/ps/server.h"

namespace strata::ps {

class ShardedVariable {
 public:
  // Creates the shards of `initial` (float32, rank >= 1) on `servers` (a repeat with the same value layout is a
  // no-op on the servers, so a restarted worker may construct it again).
  ShardedVariable(std::string name, const Tensor& initial, const Partitioner& partitioner,
                  std::vector<std::shared_ptr<ParameterServerClient>> servers, const OptimizerSpec& optimizer);
  // Refers to shards that another process (the chief) created, creating nothing: a worker's handle, so that a worker
  // never initialises a variable. A shard missing on its server is InvalidArgument naming it at the first pull or push.
  static ShardedVariable existing(std::string name, const Shape& shape, const Partitioner& partitioner,
                                  std::vector<std::shared_ptr<ParameterServerClient>> servers);

  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  int64_t num_shards() const { return static_cast<int64_t>(rows_.size()); }
  // Rows of each shard.
  const std::vector<int64_t>& shard_rows() const { return rows_; }
  // Shard i's name on its server, and that server's index.
  std::string shard_name(int64_t shard) const;
  int64_t shard_server(int64_t shard) const;

  // Makes every shard again from `value` (the variable's shape), its optimizer's slots and step ids gone: a rollback to
  // the variable's initial value.
  void replace(const Tensor& value, const OptimizerSpec& optimizer) const;
  // Every shard takes its rows of `value` (float32, the variable's shape) and keeps its optimizer's slots and step
  // count, learning rate, update count and step ids (ParameterServerClient::assign; replicated to each backup): the
  // chief writing weights back once training ended. `optimizer` is what a shard missing on its server is made with.
  void assign(const Tensor& value, const OptimizerSpec& optimizer) const;
  // The whole variable.
  Tensor pull() const;
  // Rows `rows` (axis 0, any order, repeats allowed): [rows.size(), ...].
  Tensor lookup(const std::vector<int64_t>& rows) const;
  // Applies the whole variable's gradient (split by shard); with a synchronous `round` and at `learning_rate` (0: each
  // shard's own), as ParameterServerClient::push.
  void push(const Tensor& gradient, const std::string& step_id = "", const SyncRound& round = {},
            double learning_rate = 0) const;
  // Applies the gradient of rows `rows` ([rows.size(), ...]) on the shards that hold any of them; a shard holding
  // none takes no step (its optimizer's slots do not decay, as with a lazy sparse update per shard).
  // Under a synchronous `round` every shard takes part (one holding none of the rows gets a zero row), so the round
  // completes on each shard.
  void push_rows(const std::vector<int64_t>& rows, const Tensor& gradient, const std::string& step_id = "",
                 const SyncRound& round = {}, double learning_rate = 0) const;

 private:
  // The layout alone (no shard is created).
  ShardedVariable(std::string name, const Shape& shape, DType dtype, const Partitioner& partitioner,
                  std::vector<std::shared_ptr<ParameterServerClient>> servers);
  // The shard of global row `row`, and its row within the shard.
  std::pair<int64_t, int64_t> locate(int64_t row) const;
  // Rows grouped by their shard: per shard, the positions in `rows` it serves and their rows within it; and the
  // shards that serve any.
  struct ByShard {
    std::vector<std::vector<size_t>> positions;
    std::vector<std::vector<int64_t>> local;
    std::vector<int64_t> touched;
  };
  ByShard group(const std::vector<int64_t>& rows) const;

  std::string name_;
  Shape shape_;
  std::vector<int64_t> rows_, first_;
  std::vector<std::shared_ptr<ParameterServerClient>> servers_;
};

// Every variable of `variables` pulled at once (each asking its shards in parallel too), in order: a whole model's
// values in about one round trip.
std::vector<Tensor> pull_all(const std::vector<ShardedVariable>& variables);
// gradients[i] pushed to variables[i] under `step_id` (in `round`, at `learning_rate`: as ShardedVariable::push), all
// at once. InvalidArgument when the counts differ.
void push_all(const std::vector<ShardedVariable>& variables, const std::vector<Tensor>& gradients,
              const std::string& step_id = "", const SyncRound& round = {}, double learning_rate = 0);

}  // namespace strata::ps
