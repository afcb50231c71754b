// Model weights, full training checkpoints and the Keras summary table (see strata/train/model.h).
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <iomanip>
#include <sstream>

#include "strata/error.h"
#include "strata/io/checkpoint.h"
#include "strata/io/safetensors.h"
#include "strata/random.h"
#include "strata/train/model.h"

namespace strata {

std::vector<std::pair<std::string, Tensor>> Model::named_weights() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& v : variables()) out.emplace_back(v.name(), v.value());
  return out;
}

namespace {
// `named` with every tensor on the host (weights on a GPU copied back), for the files.
std::vector<std::pair<std::string, Tensor>> on_host(std::vector<std::pair<std::string, Tensor>> named) {
  for (auto& [name, t] : named)
    if (t.defined() && !t.device().is_cpu()) t = t.to(Device::cpu());
  return named;
}
}  // namespace

void Model::save_weights(const std::string& path) const {
  check_built("save_weights");
  io::save_safetensors(path, on_host(named_weights()), {{"format", "strata"}, {"model", name()}});
}

namespace {
void assign_all(const std::vector<Variable>& vars, const io::NamedTensors& loaded) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, tensor] : loaded) by_name[name] = &tensor;
  for (const auto& v : vars) {
    Variable target = v;
    target.assign(*by_name.at(v.name()));
  }
}
}  // namespace

void Model::load_weights(const std::string& path) {
  check_built("load_weights");
  const io::NamedTensors loaded = io::load_safetensors_matching(path, named_weights());
  assign_all(variables(), loaded);
}

// The FitPosition travels in the checkpoint as the manifest's extra {"fit": {...}} and, for the
// iterator's state, a U8 tensor "iterator" in the checkpoint's input tensors; or, when workers each read their
// own share, one per worker: "iterator/worker-<w>".
namespace {
constexpr const char* kIteratorTensor = "iterator";
constexpr const char* kWorkerIteratorPrefix = "iterator/worker-";

Tensor bytes_tensor(const std::string& bytes) {
  Tensor t = Tensor::empty({static_cast<int64_t>(bytes.size())}, DType::kUInt8);
  std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

nlohmann::json position_json(const FitPosition& p) {
  return {{"epochs_done", p.epochs_done},
          {"step_in_epoch", p.step_in_epoch},
          {"input_finished", p.input_finished},
          {"metric_states", p.metric_states}};
}

FitPosition position_from(const io::TrainingCheckpoint& ckpt, const std::string& where) {
  FitPosition p;
  p.epochs_done = ckpt.epoch;
  nlohmann::json extra;
  try {
    extra = nlohmann::json::parse(ckpt.extra_json);
    if (extra.contains("fit")) {
      const nlohmann::json& fit = extra["fit"];
      p.epochs_done = fit.at("epochs_done").get<int64_t>();
      p.step_in_epoch = fit.at("step_in_epoch").get<int64_t>();
      p.input_finished = fit.at("input_finished").get<bool>();
      p.metric_states = fit.at("metric_states").get<std::vector<std::vector<double>>>();
    }
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(DataCorrupt, where << ": the manifest's \"extra\".\"fit\" position is damaged (" << e.what() << ")");
  }
  STRATA_CHECK(p.epochs_done >= 0 && p.step_in_epoch >= 0, DataCorrupt,
               where << ": the manifest's fit position (epoch " << p.epochs_done << ", step " << p.step_in_epoch
                     << ") is negative");
  const std::string prefix = kWorkerIteratorPrefix;
  for (const auto& [name, t] : ckpt.input) {
    const bool per_worker = name.rfind(prefix, 0) == 0;
    STRATA_CHECK((name == kIteratorTensor || per_worker) && t.dtype() == DType::kUInt8 && t.shape().size() == 1,
                 DataCorrupt,
                 where << ": unexpected input tensor '" << name << "' " << shape_str(t.shape()) << " "
                       << dtype_name(t.dtype()) << " (expected '" << kIteratorTensor << "' or '" << prefix
                       << "<w>', 1-D uint8)");
    std::string bytes(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.nbytes()));
    if (!per_worker) {
      p.input_state = std::move(bytes);
      continue;
    }
    // Written in worker order: worker w's is the w-th.
    const std::string expected = prefix + std::to_string(p.worker_input_states.size());
    STRATA_CHECK(name == expected, DataCorrupt,
                 where << ": input tensor '" << name << "' where '" << expected << "' belongs (one per worker, in order)");
    p.worker_input_states.push_back(std::move(bytes));
  }
  return p;
}
}  // namespace

std::string Model::save_checkpoint(const std::string& directory, int64_t number, int max_to_keep) const {
  check_built("save_checkpoint");
  io::TrainingCheckpoint ckpt;
  ckpt.weights = on_host(named_weights());
  if (optimizer_) ckpt.optimizer = optimizer_->state(trainable_variables());
  ckpt.step = step();
  ckpt.epoch = number;
  ckpt.rng = default_generator().state();
  if (fit_state_.active) {
    const FitPosition p = job_fit_position();  // across workers, every worker takes part; the chief writes
    if (const distribute::Strategy* strategy = owning_strategy(); strategy != nullptr && !strategy->is_chief()) {
      return "";
    }
    ckpt.epoch = p.epochs_done;
    ckpt.extra_json = nlohmann::json{{"fit", position_json(p)}}.dump();
    if (!p.input_state.empty()) ckpt.input.emplace_back(kIteratorTensor, bytes_tensor(p.input_state));
    for (size_t w = 0; w < p.worker_input_states.size(); ++w) {
      ckpt.input.emplace_back(kWorkerIteratorPrefix + std::to_string(w), bytes_tensor(p.worker_input_states[w]));
    }
  }
  return io::CheckpointManager(directory, max_to_keep).save(ckpt, number);
}

int64_t Model::restore_checkpoint(const std::string& path) {
  check_built("restore_checkpoint");
  std::string ckpt_path = path;
  struct stat st {};
  if (::stat((path + "/manifest.json").c_str(), &st) != 0) {
    std::optional<std::string> latest = io::CheckpointManager(path).latest();
    STRATA_CHECK(latest.has_value(), IoError, "no checkpoint found in '" << path << "'");
    ckpt_path = *latest;
  }
  io::TrainingCheckpoint ckpt = io::CheckpointManager::restore(ckpt_path);
  io::check_matches(named_weights(), ckpt.weights, ckpt_path + "/model.safetensors");
  FitPosition position = position_from(ckpt, ckpt_path);
  assign_all(variables(), ckpt.weights);
  if (optimizer_ && !ckpt.optimizer.empty()) optimizer_->load_state(ckpt.optimizer, trainable_variables());
  default_generator().set_state(ckpt.rng);
  restored_position_ = std::move(position);
  return restored_position_.epochs_done;
}

// ---- summary

namespace {
std::string shape_with_none(const Shape& s) {
  if (s.empty()) return "?";
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0) out << ", ";
    if (s[i] < 0) {
      out << "None";
    } else {
      out << s[i];
    }
  }
  out << ")";
  return out.str();
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string padded(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}
}  // namespace

std::string Model::summary() const {
  STRATA_CHECK(built(), InvalidArgument,
               "model '" << name() << "' is not built yet: call build_for(input_shape) or run it on data first");
  const std::string rule(65, '_');
  const std::string double_rule(65, '=');
  std::ostringstream out;
  out << "Model: \"" << name() << "\"\n" << rule << "\n";
  out << " " << padded("Layer (type)", 28) << padded("Output Shape", 26) << "Param #\n" << double_rule << "\n";
  if (graph_) {
    for (const auto& in : graph_->inputs()) {
      out << " " << padded(in.node()->input_name + " (InputLayer)", 28) << padded(shape_with_none(in.shape()), 26)
          << "0\n";
    }
  }
  for (const auto& layer : layers()) {
    out << " " << padded(layer->name() + " (" + layer->class_name() + ")", 28)
        << padded(shape_with_none(layer->output_shape()), 26) << with_commas(layer->count_params()) << "\n";
  }
  int64_t trainable = 0, total = 0;
  for (const auto& v : trainable_variables()) trainable += v.value().numel();
  total = count_params();
  out << double_rule << "\n";
  out << "Total params: " << with_commas(total) << "\n";
  out << "Trainable params: " << with_commas(trainable) << "\n";
  out << "Non-trainable params: " << with_commas(total - trainable) << "\n" << rule << "\n";
  return out.str();
}

void Model::print_summary() const { std::fputs(summary().c_str(), stdout); }

}  // namespace strata
