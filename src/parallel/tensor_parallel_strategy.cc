// TensorParallelStrategy (strata/parallel/tensor_parallel_strategy.h): the plan of which layers split, the ranks'
// layers and the map from their weights to the model's, and the step that runs the ranks and joins their gradients.
// Thread-safety: one driving thread; each step's ranks are threads that share only the replicated layers (called
// with a tape each, which nn/layer.h allows) and their communicator group.
#include "strata/parallel/tensor_parallel_strategy.h"

#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "distribute/devices.h"
#include "strata/comm/local.h"
#include "strata/error.h"
#include "strata/gradient_tape.h"
#include "strata/nn/attention.h"
#include "strata/nn/core_layers.h"
#include "strata/nn/transformer.h"
#include "strata/ops.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizer.h"
#include "strata/parallel/tensor_parallel.h"
#include "strata/parallel/tensor_parallel_transformer.h"
#include "strata/random.h"
#include "strata/threading.h"
#include "strata/trace.h"

namespace strata::parallel {

namespace {

using Layers = std::vector<std::shared_ptr<nn::Layer>>;

// Whether a Dense's activation acts elementwise, so that it can run on each rank's columns.
bool elementwise(const nn::Dense& dense) {
  const std::string& name = dense.options().activation.name();
  return name != "softmax" && name != "log_softmax" && name != "custom";
}

int index_of(const std::vector<Variable>& vars, const Variable& v) {
  for (size_t i = 0; i < vars.size(); ++i) {
    if (vars[i].same_as(v)) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

// The ranks' layers for one program, and how their weights and gradients map to the model's.
struct TensorParallelStrategy::Plan {
  const void* program = nullptr;
  const void* loss = nullptr;
  const void* optimizer = nullptr;
  std::vector<std::shared_ptr<comm::Communicator>> comms;
  std::vector<Layers> layers;                    // per rank
  std::vector<std::vector<WeightShard>> shards;  // per rank: the split layers' weights
  std::vector<std::vector<Variable>> rank_vars;  // per rank: the variables whose gradients each rank takes
  std::vector<Variable> model_vars;              // the model's trainable variables, the optimizer's order
  struct Source {
    int axis = -1;           // -1: rank 0's gradient of a whole weight; else the ranks' gradients joined on it
    std::vector<int> index;  // per rank (axis >= 0) or for rank 0: the position in rank_vars
  };
  std::vector<Source> sources;  // per model variable
  Generator generator;          // every rank's default generator at the start of a step (replicated dropouts agree)
};

TensorParallelStrategy::TensorParallelStrategy(TensorParallelStrategyOptions options)
    : Strategy(distribute::detail::checked_devices("TensorParallelStrategy", {"/cpu:0"}, /*gpus_allowed=*/false)),
      options_(options) {
  STRATA_CHECK(options_.tp >= 1, InvalidArgument,
               "TensorParallelStrategy: tp must be a positive number of ranks, got " << options_.tp);
}

TensorParallelStrategy::~TensorParallelStrategy() = default;

Variable TensorParallelStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  return make_distributed_variable({initial_value}, options, id());
}

std::string TensorParallelStrategy::describe() const {
  return "TensorParallelStrategy, " + std::to_string(options_.tp) + (options_.tp == 1 ? " rank" : " ranks") +
         " (threads of this process, " + std::to_string(std::max(1, num_threads() / options_.tp)) +
         (num_threads() / options_.tp > 1 ? " threads each)" : " thread each)");
}

std::optional<double> TensorParallelStrategy::run_train_step(distribute::TrainingProgram& program,
                                                             const data::Element& batch) {
  nn::Layer& model = program.program_layer();
  STRATA_CHECK(batch.size() == 2, InvalidArgument,
               "train_step under TensorParallelStrategy: model '"
                   << model.name() << "' trains on elements (x, y); got one of " << batch.size()
                   << " component(s) (sample weights are not split yet)");
  const Tensor& x = batch[0];
  const Tensor& y = batch[1];
  const std::shared_ptr<losses::Loss> loss = program.compiled_loss();
  const std::shared_ptr<optim::Optimizer> optimizer = program.compiled_optimizer();
  const int tp = options_.tp;
  if (!plan_ || plan_->program != &program || plan_->loss != loss.get() || plan_->optimizer != optimizer.get()) {
    STRATA_CHECK(program.runs_layers_in_order(), InvalidArgument,
                 "train_step under TensorParallelStrategy: model '"
                     << model.name() << "' is a " << model.class_name()
                     << "; the split layers are found among a Sequential model's layers");
    if (!program.program_built()) {  // the layers are split from built ones
      NoGradGuard no_grad;
      model(Variable(x.slice(0, 1), /*trainable=*/false));
    }
    // The ranks' weights are this strategy's, as the model's (scope() is not for a replica's thread).
    const ScopedVariableCreator variables_here(
        [this](const Tensor& initial, const VariableOptions& o, const auto&) { return create_variable(initial, o); });
    auto plan = std::make_unique<Plan>();
    plan->program = &program;
    plan->loss = loss.get();
    plan->optimizer = optimizer.get();
    plan->comms = comm::make_local_group(tp);
    plan->layers.resize(static_cast<size_t>(tp));
    plan->shards.resize(static_cast<size_t>(tp));
    plan->generator = default_generator();
    std::string layout;
    bool split_any = false;
    const Layers& layers = model.layers();
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::shared_ptr<nn::Layer>& layer = layers[i];
      STRATA_CHECK(!layer->regularization_loss().defined(), InvalidArgument,
                   "TensorParallelStrategy: layer '" << layer->name()
                                                     << "' has a weight regularizer, which the ranks do not apply yet");
      STRATA_CHECK(layer->class_name() != "BatchNormalization", InvalidArgument,
                   "TensorParallelStrategy: layer '"
                       << layer->name()
                       << "' is a BatchNormalization, whose moving statistics every rank would update");
      layout += layout.empty() ? "" : " ";
      if (const auto* block = dynamic_cast<const nn::TransformerEncoder*>(layer.get())) {
        for (int r = 0; r < tp; ++r) {
          nn::TransformerEncoderOptions o = block->options();
          o.name = block->name();
          auto split = std::make_shared<TensorParallelTransformerEncoder>(block->intermediate_dim(), block->num_heads(),
                                                                          plan->comms[r], o);
          split->load_shard_of(*block);
          const std::vector<WeightShard> shards = split->weight_shards(*block);
          plan->shards[r].insert(plan->shards[r].end(), shards.begin(), shards.end());
          plan->layers[r].push_back(split);
        }
        layout += layer->name() + "[heads/" + std::to_string(tp) + ", mlp/" + std::to_string(tp) + "]";
        split_any = true;
      } else if (const auto* mha = dynamic_cast<const nn::MultiHeadAttention*>(layer.get())) {
        for (int r = 0; r < tp; ++r) {
          nn::MultiHeadAttentionOptions o = mha->options();
          o.name = mha->name();
          auto split =
              std::make_shared<TensorParallelMultiHeadAttention>(mha->num_heads(), mha->key_dim(), plan->comms[r], o);
          split->load_shard_of(*mha);
          const std::vector<WeightShard> shards = split->weight_shards(*mha);
          plan->shards[r].insert(plan->shards[r].end(), shards.begin(), shards.end());
          plan->layers[r].push_back(split);
        }
        layout += layer->name() + "[heads/" + std::to_string(tp) + "]";
        split_any = true;
      } else if (const auto* up = dynamic_cast<const nn::Dense*>(layer.get());
                 up != nullptr && i + 1 < layers.size() && elementwise(*up) &&
                 dynamic_cast<const nn::Dense*>(layers[i + 1].get()) != nullptr &&
                 !layers[i + 1]->regularization_loss().defined()) {
        const auto& down = static_cast<const nn::Dense&>(*layers[i + 1]);
        STRATA_CHECK(up->units() % tp == 0, InvalidArgument,
                     "TensorParallelStrategy: Dense '" << up->name() << "' of " << up->units()
                                                       << " units (the first of a Megatron pair with '" << down.name()
                                                       << "') is not a multiple of the " << tp << " ranks");
        for (int r = 0; r < tp; ++r) {
          auto column =
              std::make_shared<ColumnParallelDense>(up->units(), plan->comms[r],
                                                    ColumnParallelDenseOptions{.activation = up->options().activation,
                                                                               .use_bias = up->bias().defined(),
                                                                               .gather_output = false,
                                                                               .name = up->name()});
          auto row = std::make_shared<RowParallelDense>(down.units(), plan->comms[r],
                                                        RowParallelDenseOptions{.activation = down.options().activation,
                                                                                .use_bias = down.bias().defined(),
                                                                                .input_is_parallel = true,
                                                                                .name = down.name()});
          column->load_shard_of(*up);
          row->load_shard_of(down);
          for (const auto& shards : {weight_shards(*column, *up), weight_shards(*row, down)}) {
            plan->shards[r].insert(plan->shards[r].end(), shards.begin(), shards.end());
          }
          plan->layers[r].push_back(column);
          plan->layers[r].push_back(row);
        }
        layout +=
            up->name() + "[columns/" + std::to_string(tp) + "] " + down.name() + "[rows/" + std::to_string(tp) + "]";
        split_any = true;
        ++i;
      } else {
        for (int r = 0; r < tp; ++r) plan->layers[r].push_back(layer);  // whole on every rank
        layout += layer->name();
      }
    }
    STRATA_CHECK(split_any, InvalidArgument,
                 "TensorParallelStrategy: model '"
                     << model.name()
                     << "' has no layer to split over the ranks (a TransformerEncoder, a MultiHeadAttention, or two "
                        "Dense layers in a row, the first with an elementwise activation)");
    // Every rank takes the gradients of all its trainable weights: the same backward on every rank, so that each
    // issues the same collectives.
    plan->rank_vars.resize(static_cast<size_t>(tp));
    for (int r = 0; r < tp; ++r) {
      for (const auto& l : plan->layers[r]) {
        for (const Variable& v : l->trainable_variables()) plan->rank_vars[r].push_back(v);
      }
    }
    plan->model_vars = model.trainable_variables();
    for (const Variable& m : plan->model_vars) {
      Plan::Source source;
      for (size_t k = 0; k < plan->shards[0].size(); ++k) {
        if (!plan->shards[0][k].whole.same_as(m)) continue;
        source.axis = plan->shards[0][k].axis;
        for (int r = 0; r < (source.axis < 0 ? 1 : tp); ++r) {
          source.index.push_back(index_of(plan->rank_vars[r], plan->shards[r][k].part));
        }
        break;
      }
      if (source.index.empty()) source.index.push_back(index_of(plan->rank_vars[0], m));
      plan->sources.push_back(std::move(source));
    }
    layout_ = layout;
    plan_ = std::move(plan);
  }

  Plan& plan = *plan_;
  std::vector<std::vector<Tensor>> grads(static_cast<size_t>(tp));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(tp));
  double step_loss = 0;
  Tensor predictions;
  const int threads_per_rank = std::max(1, num_threads() / tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      trace::name_thread("tensor-parallel rank " + std::to_string(r));
      ScopedNumThreads cores(threads_per_rank);
      default_generator() = plan.generator;
      try {
        load_shards(plan.shards[r], r, tp);  // this rank's slices of the model's current weights
        GradientTape tape;
        Variable h(x, /*trainable=*/false);
        for (const auto& layer : plan.layers[r]) h = (*layer)(h, /*training=*/true);
        const Variable l = (*loss)(Variable(y, /*trainable=*/false), h);
        grads[r] = tape.gradient(l, plan.rank_vars[r], UnconnectedGradients::kZero);
        if (r == 0) {
          step_loss = l.value().item<float>();
          predictions = h.value();
          plan.generator = default_generator();
        }
      } catch (...) {
        errors[r] = std::current_exception();
        plan.comms[r]->abort("tensor-parallel rank " + std::to_string(r) + " failed");  // the others stop waiting
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) plan_.reset();  // the group is aborted: the next step makes a new one
  }
  // The first rank that failed of its own has the cause; the others failed on the abort.
  for (const auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const Timeout&) {
      continue;
    } catch (...) {
      throw;
    }
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }

  // The whole weights' gradients, in the model's order.
  std::vector<Tensor> whole(plan.model_vars.size());
  for (size_t i = 0; i < plan.model_vars.size(); ++i) {
    const Plan::Source& s = plan.sources[i];
    if (s.index[0] < 0) {
      whole[i] = Tensor::zeros(plan.model_vars[i].shape());
      continue;
    }
    std::vector<Tensor> parts;
    for (size_t r = 0; r < s.index.size(); ++r) parts.push_back(grads[r][static_cast<size_t>(s.index[r])]);
    whole[i] = unshard(parts, s.axis);
  }
  optimizer->apply_gradients(whole, plan.model_vars);
  program.track_predictions(y, predictions);
  program.track_step_loss(step_loss, y.dim(0));
  return step_loss;
}

}  // namespace strata::parallel
