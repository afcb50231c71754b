// Reading the job file's validation and callback sections, and making the callbacks (see job_callbacks.h).
// Thread-safety: free functions of their arguments.
#include "cli/job_callbacks.h"

#include <algorithm>

#include "cli/job_section.h"
#include "strata/error.h"

namespace strata::cli {

using detail::kNonNegative;
using detail::kPositive;
using detail::Range;
using detail::Section;

ValidationSpec read_validation(Section& top, const std::string& data_format) {
  ValidationSpec v;
  if (!top.has("validation")) return v;
  const YAML::Node node = top.get("validation");
  Section located(node, "validation", top.file());
  const bool split = located.has("split"), source = located.has("format");
  STRATA_CHECK(split != source, InvalidArgument,
               located.where(node) << "validation: give split (a fraction of the training data) or a source (format "
                                      "and its files), one of them");
  if (split) {
    v.split = located.number("split", 0, Range{.lo = 0, .hi = 1, .lo_open = true, .hi_open = true});
  } else {
    v.format = located.string("format");
    STRATA_CHECK(v.format == data_format, InvalidArgument,
                 located.where(located.get("format"))
                     << "validation.format: '" << v.format << "' must be the training data's format (data.format: "
                     << data_format << "), whose features and shapes it is read with");
    if (v.format == "idx" || v.format == "image_folder") {
      v.directory = located.required_string("directory");
    } else if (v.format == "npy" || v.format == "npz") {
      if (v.format == "npz") v.file = located.required_string("file");
      v.x = located.required_string("x");
      v.y = located.required_string("y");
    } else {
      v.files = located.strings("files");
      STRATA_CHECK(!v.files.empty(), InvalidArgument,
                   located.where(node) << "validation.files: list the TFRecord files (globs allowed)");
    }
  }
  located.finish();
  return v;
}

namespace {
// The monitor key of `s`, checked against the names the epoch's logs will hold.
std::string read_monitor(Section& s, const std::string& section, const std::vector<std::string>& metrics,
                         bool validated) {
  const std::string monitor = s.string("monitor", "val_loss");
  std::vector<std::string> names = {"loss"};
  names.insert(names.end(), metrics.begin(), metrics.end());
  const bool val = monitor.rfind("val_", 0) == 0;
  const std::string base = val ? monitor.substr(4) : monitor;
  const YAML::Node where = s.has("monitor") ? s.get("monitor") : YAML::Node();
  STRATA_CHECK(std::find(names.begin(), names.end(), base) != names.end(), InvalidArgument,
               s.where(where) << section << ".monitor: '" << monitor << "' is not in the epoch's logs; they hold loss"
                              << (metrics.empty() ? "" : " and the job's metrics") << (validated ? ", and val_ ones" : ""));
  STRATA_CHECK(!val || validated, InvalidArgument,
               s.where(where) << section << ".monitor: '" << monitor
                              << "' needs validation data: add `validation: {split: 0.1}` (or a source), or monitor "
                              << base);
  return monitor;
}

callbacks::Mode read_mode(Section& s, const std::string& section) {
  return s.named("mode", "auto", [&](const std::string& text) { return callbacks::parse_mode(text, section); });
}

int read_verbose(Section& s) {
  const int64_t verbose = s.integer_at_least("verbose", 1, 0);
  STRATA_CHECK(verbose <= 1, InvalidArgument, s.where(s.get("verbose")) << "verbose: must be 0 or 1, got " << verbose);
  return static_cast<int>(verbose);
}
}  // namespace

JobCallbacks read_callbacks(Section& top, const std::vector<std::string>& metrics, bool validated) {
  JobCallbacks out;
  const std::string& file = top.file();
  if (top.has("early_stopping")) {
    Section s(top.get("early_stopping"), "early_stopping", file);
    callbacks::EarlyStopping::Options o;
    o.monitor = read_monitor(s, "early_stopping", metrics, validated);
    o.min_delta = s.number("min_delta", 0, kNonNegative);
    o.patience = static_cast<int>(s.integer_at_least("patience", 0, 0));
    o.mode = read_mode(s, "early_stopping.mode");
    if (s.has("baseline")) o.baseline = s.number("baseline", 0, detail::kAnyNumber);
    o.restore_best_weights = s.flag("restore_best_weights", false);
    o.verbose = read_verbose(s);
    s.finish();
    out.early_stopping = o;
  }
  if (top.has("model_checkpoint")) {
    Section s(top.get("model_checkpoint"), "model_checkpoint", file);
    ModelCheckpointSpec spec;
    spec.filepath = s.required_string("filepath");
    spec.options.monitor = read_monitor(s, "model_checkpoint", metrics, validated);
    spec.options.save_best_only = s.flag("save_best_only", false);
    spec.options.mode = read_mode(s, "model_checkpoint.mode");
    spec.options.verbose = read_verbose(s);
    s.finish();
    out.model_checkpoint = spec;
  }
  if (top.has("reduce_lr_on_plateau")) {
    Section s(top.get("reduce_lr_on_plateau"), "reduce_lr_on_plateau", file);
    callbacks::ReduceLROnPlateau::Options o;
    o.monitor = read_monitor(s, "reduce_lr_on_plateau", metrics, validated);
    o.factor = s.number("factor", 0.1, Range{.lo = 0, .hi = 1, .lo_open = true, .hi_open = true});
    o.patience = static_cast<int>(s.integer_at_least("patience", 10, 0));
    o.mode = read_mode(s, "reduce_lr_on_plateau.mode");
    o.min_delta = s.number("min_delta", 1e-4, kNonNegative);
    o.cooldown = static_cast<int>(s.integer_at_least("cooldown", 0, 0));
    o.min_lr = s.number("min_lr", 0, kNonNegative);
    o.verbose = read_verbose(s);
    s.finish();
    out.reduce_lr_on_plateau = o;
  }
  return out;
}

std::vector<std::shared_ptr<Callback>> make_callbacks(const JobCallbacks& spec) {
  std::vector<std::shared_ptr<Callback>> out;
  if (spec.early_stopping) out.push_back(std::make_shared<callbacks::EarlyStopping>(*spec.early_stopping));
  if (spec.model_checkpoint) {
    out.push_back(std::make_shared<callbacks::ModelCheckpoint>(spec.model_checkpoint->filepath,
                                                               spec.model_checkpoint->options));
  }
  if (spec.reduce_lr_on_plateau) {
    out.push_back(std::make_shared<callbacks::ReduceLROnPlateau>(*spec.reduce_lr_on_plateau));
  }
  return out;
}

}  // namespace strata::cli
