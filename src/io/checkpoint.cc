// CheckpointManager: numbered checkpoint directories written whole or not at all, a pointer file
// naming the latest, the manifest that describes them, damage reported by `latest` rather than
// skipped, and removal of dead writers' temporaries (see strata/io/checkpoint.h).
// Thread-safety: a manager is not synchronised; `restore` shares no state; the temporaries this
// process is writing are registered process-wide (io/atomic_file.h), so cleanup never takes them.
#include "strata/io/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json_depth.h"
#include "io/atomic_file.h"
#include "io/tensor_specs.h"
#include "strata/trace.h"

namespace strata::io {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kPointerFile = "checkpoint";
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kInputFile = "input.safetensors";
constexpr const char* kPointerFormat = "strata-checkpoint-pointer";
constexpr const char* kManifestFormat = "strata-checkpoint";

std::string ckpt_name(int64_t number) { return "ckpt-" + std::to_string(number); }

// The number of a "ckpt-<n>" name; none for anything else.
std::optional<int64_t> ckpt_number(const std::string& name) {
  if (name.rfind("ckpt-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return std::nullopt;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  return std::stoll(name.substr(5));
}

bool is_complete_checkpoint(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(dir / kManifestFile, ec);
}

// Whether anything (even a dangling link) has this name.
bool entry_exists(const fs::path& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

[[noreturn]] void throw_incomplete(const fs::path& ckpt, const std::string& why) {
  STRATA_THROW(DataCorrupt, "checkpoint " << ckpt.string() << " is incomplete (it has no " << kManifestFile << ") "
                                          << why
                                          << "; CheckpointManager never leaves a ckpt-<n> without its manifest, so it "
                                             "is damaged: repair or restore it, or move it away to resume from an "
                                             "older checkpoint");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in, IoError, "cannot open " << path << ": " << detail::errno_message(errno));
  std::ostringstream s;
  s << in.rdbuf();
  STRATA_CHECK(!in.bad(), IoError, "cannot read " << path);
  return s.str();
}

json parse_json_file(const std::string& path) {
  const std::string text = read_text(path);
  STRATA_CHECK(::strata::detail::json_depth(text) <= ::strata::detail::kMaxJsonDepth, DataCorrupt,
               path << " nests arrays or objects deeper than " << ::strata::detail::kMaxJsonDepth << " levels");
  try {
    return json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(DataCorrupt, path << " is not valid JSON (" << e.what() << ")");
  }
}

std::string utc_now_iso8601() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json describe(const NamedTensors& tensors) {
  json list = json::array();
  for (const auto& [name, t] : tensors)
    list.push_back({{"name", name}, {"dtype", safetensors_dtype_code(t.dtype())}, {"shape", t.shape()}});
  return list;
}

std::vector<detail::TensorSpec> specs_from_manifest(const json& list, const std::string& where) {
  STRATA_CHECK(list.is_array(), DataCorrupt, where << " is not a list of tensors");
  std::vector<detail::TensorSpec> specs;
  for (const auto& item : list) {
    STRATA_CHECK(item.is_object() && item.contains("name") && item["name"].is_string() && item.contains("dtype") &&
                     item["dtype"].is_string() && item.contains("shape") && item["shape"].is_array(),
                 DataCorrupt, where << ": entry " << item.dump() << " is not {name, dtype, shape}");
    const auto dtype = detail::dtype_from_code(item["dtype"].get<std::string>());
    STRATA_CHECK(
        dtype.has_value(), DataCorrupt,
        where << ": tensor '" << item["name"].get<std::string>() << "' has unknown dtype " << item["dtype"].dump());
    detail::TensorSpec spec{item["name"].get<std::string>(), {}, *dtype};
    for (const auto& d : item["shape"]) {
      STRATA_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, DataCorrupt,
                   where << ": tensor '" << spec.name << "' has shape " << item["shape"].dump());
      spec.shape.push_back(d.get<int64_t>());
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

// Moves the complete directory `from` to `to`, replacing a `to` that exists. With renameat2's
// RENAME_EXCHANGE the swap is atomic and the old directory ends up at `from`, which is then removed.
void move_directory_into_place(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (fs::exists(to, ec)) {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(from, ec);
      return;
    }
    // A file system without RENAME_EXCHANGE: move the old one aside first (not atomic, but the old
    // checkpoint survives under the aside name until the new one is in place).
    const fs::path aside = from.string() + ".old";
    STRATA_CHECK(::rename(to.c_str(), aside.c_str()) == 0, IoError,
                 "cannot replace checkpoint " << to.string() << ": " << detail::errno_message(errno));
    if (::rename(from.c_str(), to.c_str()) != 0) {
      const int err = errno;
      ::rename(aside.c_str(), to.c_str());
      STRATA_THROW(IoError, "cannot move checkpoint " << from.string() << " to " << to.string() << ": "
                                                      << detail::errno_message(err));
    }
    fs::remove_all(aside, ec);
    return;
  }
  STRATA_CHECK(
      ::rename(from.c_str(), to.c_str()) == 0, IoError,
      "cannot move checkpoint " << from.string() << " to " << to.string() << ": " << detail::errno_message(errno));
}

// The "all" list of the pointer file (names, oldest first); empty when there is no pointer file.
std::vector<std::string> read_pointer_list(const fs::path& dir, std::string* latest) {
  const fs::path pointer = dir / kPointerFile;
  std::error_code ec;
  if (!fs::exists(pointer, ec)) return {};
  const json j = parse_json_file(pointer.string());
  const bool ok =
      j.is_object() && j.contains("latest") && j["latest"].is_string() && j.contains("all") && j["all"].is_array();
  STRATA_CHECK(ok, DataCorrupt,
               pointer.string() << " is not a strata checkpoint pointer ({\"latest\": ..., \"all\": [...]}); "
                                   "remove it to fall back to the highest-numbered ckpt-<n>");
  std::vector<std::string> all;
  for (const auto& name : j["all"]) {
    STRATA_CHECK(name.is_string() && ckpt_number(name.get<std::string>()), DataCorrupt,
                 pointer.string() << ": " << name.dump() << " is not a ckpt-<n> name");
    all.push_back(name.get<std::string>());
  }
  STRATA_CHECK(ckpt_number(j["latest"].get<std::string>()), DataCorrupt,
               pointer.string() << ": \"latest\" is " << j["latest"].dump() << ", not a ckpt-<n> name");
  if (latest) *latest = j["latest"].get<std::string>();
  return all;
}

// Every entry named ckpt-<n> in `dir`, complete or not, by increasing number.
struct Found {
  int64_t number;
  std::string name;
  bool complete;
};
std::vector<Found> scan_all_checkpoints(const fs::path& dir) {
  std::vector<Found> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (const auto n = ckpt_number(name)) found.push_back({*n, name, is_complete_checkpoint(entry.path())});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.number < b.number; });
  return found;
}

// The complete ckpt-<n> directories in `dir`, by increasing number.
std::vector<std::string> scan_checkpoints(const fs::path& dir) {
  std::vector<std::string> names;
  for (auto& f : scan_all_checkpoints(dir))
    if (f.complete) names.push_back(std::move(f.name));
  return names;
}

// Deletes a whole checkpoint without ever leaving a ckpt-<n> that lacks files: it is first renamed to a
// temporary name (registered while it is removed), so a crash halfway leaves litter, not damage.
void remove_checkpoint(const fs::path& dir, const std::string& name) {
  const fs::path doomed = detail::temp_name_for((dir / ("." + name)).string());
  detail::TempInProgress in_progress(doomed.string());
  STRATA_CHECK(::rename((dir / name).c_str(), doomed.c_str()) == 0, IoError,
               "cannot remove old checkpoint " << (dir / name).string() << ": " << detail::errno_message(errno));
  std::error_code ec;
  fs::remove_all(doomed, ec);
  STRATA_CHECK(!ec, IoError,
               "cannot remove old checkpoint " << (dir / name).string() << " (moved to " << doomed.string()
                                               << "): " << ec.message());
}

}  // namespace

void CheckpointManager::remove_all() const {
  const fs::path dir(directory_);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  fs::remove(dir / kPointerFile, ec);
  STRATA_CHECK(!ec, IoError, "cannot remove " << (dir / kPointerFile).string() << ": " << ec.message());
  // Newest first: every moment, what is left is a prefix of complete checkpoints.
  std::vector<Found> found = scan_all_checkpoints(dir);
  for (auto it = found.rbegin(); it != found.rend(); ++it) remove_checkpoint(dir, it->name);
  fs::remove(dir, ec);  // only when empty: whatever else the directory holds stays
}

CheckpointManager::CheckpointManager(std::string directory, int max_to_keep)
    : directory_(std::move(directory)), max_to_keep_(max_to_keep) {
  STRATA_CHECK(!directory_.empty(), InvalidArgument, "CheckpointManager: the directory is empty");
}

std::string CheckpointManager::save(const TrainingCheckpoint& checkpoint, int64_t number) {
  trace::Span span("io", "checkpoint write");
  STRATA_CHECK(number >= 0, InvalidArgument,
               "CheckpointManager::save to " << directory_ << ": checkpoint number " << number << " is negative");
  json extra;
  try {
    extra = json::parse(checkpoint.extra_json);
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(InvalidArgument,
                 "CheckpointManager::save to " << directory_ << ": extra_json is not valid JSON (" << e.what() << ")");
  }
  STRATA_CHECK(extra.is_object(), InvalidArgument,
               "CheckpointManager::save to " << directory_ << ": extra_json is a JSON " << extra.type_name()
                                             << ", not an object");
  const fs::path dir(directory_);
  std::error_code ec;
  fs::create_directories(dir, ec);
  STRATA_CHECK(!ec, IoError, "cannot create checkpoint directory " << directory_ << ": " << ec.message());

  const std::string name = ckpt_name(number);
  const fs::path final_dir = dir / name;
  // Replacing a checkpoint of the same number is fine; replacing a damaged one would hide the damage.
  if (entry_exists(final_dir) && !is_complete_checkpoint(final_dir))
    throw_incomplete(final_dir, "and CheckpointManager::save will not write over it");
  const fs::path temp_dir = detail::temp_name_for((dir / ("." + name)).string());
  detail::TempInProgress in_progress(temp_dir.string());
  fs::create_directory(temp_dir, ec);
  STRATA_CHECK(!ec, IoError, "cannot create " << temp_dir.string() << ": " << ec.message());
  try {
    const std::map<std::string, std::string> meta = {
        {"format", "strata"}, {"step", std::to_string(checkpoint.step)}, {"epoch", std::to_string(checkpoint.epoch)}};
    save_safetensors((temp_dir / kModelFile).string(), checkpoint.weights, meta);
    save_safetensors((temp_dir / kOptimizerFile).string(), checkpoint.optimizer, meta);
    json files = {{"model", kModelFile}, {"optimizer", kOptimizerFile}};
    if (!checkpoint.input.empty()) {
      save_safetensors((temp_dir / kInputFile).string(), checkpoint.input, meta);
      files["input"] = kInputFile;
    }
    json manifest = {
        {"format", kManifestFormat},
        {"version", kCheckpointFormatVersion},
        {"created", utc_now_iso8601()},
        {"step", checkpoint.step},
        {"epoch", checkpoint.epoch},
        {"rng", {{"seed", checkpoint.rng.seed}, {"stream", checkpoint.rng.stream}, {"offset", checkpoint.rng.offset}}},
        {"files", files},
        {"model", describe(checkpoint.weights)},
        {"optimizer", describe(checkpoint.optimizer)},
    };
    if (!checkpoint.input.empty()) manifest["input"] = describe(checkpoint.input);
    manifest["extra"] = extra;
    detail::write_file_atomically((temp_dir / kManifestFile).string(), manifest.dump(2) + "\n");
    detail::fsync_directory(temp_dir.string());
    move_directory_into_place(temp_dir, final_dir);
    detail::fsync_directory(directory_);
  } catch (...) {
    fs::remove_all(temp_dir, ec);
    throw;
  }

  // The new checkpoint is in place: list it last in the pointer file, then drop the oldest ones.
  std::vector<std::string> listed;
  try {
    listed = read_pointer_list(dir, nullptr);
  } catch (const DataCorrupt&) {
    // A damaged pointer file must not stop training from saving: rebuild it from the directory.
    listed = scan_checkpoints(dir);
  }
  std::vector<std::string> all;
  for (const auto& n : listed)
    if (n != name && is_complete_checkpoint(dir / n)) all.push_back(n);
  all.push_back(name);
  std::vector<std::string> drop;
  if (max_to_keep_ >= 1 && static_cast<int>(all.size()) > max_to_keep_) {
    const auto excess = all.size() - static_cast<size_t>(max_to_keep_);
    drop.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(excess));
    all.erase(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(excess));
  }
  const json pointer = {
      {"format", kPointerFormat}, {"version", kCheckpointFormatVersion}, {"latest", name}, {"all", all}};
  detail::write_file_atomically((dir / kPointerFile).string(), pointer.dump(2) + "\n");
  for (const auto& old : drop) remove_checkpoint(dir, old);
  // Temporaries of writers that were killed (never another live process's work in progress).
  detail::remove_dead_writers_temporaries(directory_);
  return final_dir.string();
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  const fs::path dir(directory_);
  std::vector<std::string> out;
  for (const auto& n : read_pointer_list(dir, nullptr))
    if (is_complete_checkpoint(dir / n)) out.push_back((dir / n).string());
  return out;
}

std::optional<std::string> CheckpointManager::latest() const {
  const fs::path dir(directory_);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::string named;  // what the pointer file calls the latest; empty without one
  read_pointer_list(dir, &named);
  if (!named.empty() && entry_exists(dir / named) && !is_complete_checkpoint(dir / named))
    throw_incomplete(dir / named, "but " + (dir / kPointerFile).string() + " names it as the latest");
  const auto found = scan_all_checkpoints(dir);
  if (!found.empty() && !found.back().complete)
    throw_incomplete(dir / found.back().name, "and is the highest-numbered checkpoint in " + directory_);
  if (!named.empty() && is_complete_checkpoint(dir / named)) return (dir / named).string();
  // No pointer, or it names a checkpoint that is gone: the highest-numbered complete ckpt-<n>.
  const auto complete = scan_checkpoints(dir);
  STRATA_CHECK(!complete.empty() || named.empty(), DataCorrupt,
               (dir / kPointerFile).string()
                   << " names " << named << " as the latest checkpoint, but " << (dir / named).string()
                   << " is gone and no complete checkpoint is left in " << directory_
                   << ": the checkpoints were lost; remove the pointer file to start over");
  if (complete.empty()) return std::nullopt;
  return (dir / complete.back()).string();
}

TrainingCheckpoint CheckpointManager::restore(const std::string& checkpoint_path) {
  const fs::path dir(checkpoint_path);
  const std::string manifest_path = (dir / kManifestFile).string();
  std::error_code ec;
  STRATA_CHECK(fs::is_regular_file(manifest_path, ec), IoError,
               checkpoint_path << " is not a checkpoint: it has no " << kManifestFile);
  const json m = parse_json_file(manifest_path);
  const auto has = [&](const char* key) { return m.is_object() && m.contains(key); };
  STRATA_CHECK(has("format") && m["format"] == kManifestFormat && has("version") && m["version"].is_number_integer(),
               DataCorrupt, manifest_path << " is not a strata checkpoint manifest (no format/version)");
  const int version = m["version"].get<int>();
  STRATA_CHECK(version <= kCheckpointFormatVersion, DataCorrupt,
               manifest_path << " has format version " << version << ", newer than the " << kCheckpointFormatVersion
                             << " this build reads");
  for (const char* key : {"step", "epoch", "rng", "files", "model", "optimizer"})
    STRATA_CHECK(has(key), DataCorrupt, manifest_path << " has no \"" << key << "\"");
  TrainingCheckpoint ckpt;
  try {
    ckpt.step = m["step"].get<int64_t>();
    ckpt.epoch = m["epoch"].get<int64_t>();
    ckpt.rng.seed = m["rng"].at("seed").get<uint64_t>();
    ckpt.rng.stream = m["rng"].at("stream").get<uint64_t>();
    ckpt.rng.offset = m["rng"].at("offset").get<uint64_t>();
    struct Part {
      const char* key;  // in "files" and the list of its tensors
      NamedTensors* out;
    };
    std::vector<Part> parts = {{"model", &ckpt.weights}, {"optimizer", &ckpt.optimizer}};
    STRATA_CHECK(m["files"].is_object(), DataCorrupt, manifest_path << ": \"files\" is not an object");
    if (m["files"].contains("input"))
      parts.push_back({"input", &ckpt.input});  // absent: no input state, or an older checkpoint
    for (const auto& part : parts) {
      const std::string file = m["files"].at(part.key).get<std::string>();
      STRATA_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..", DataCorrupt,
                   manifest_path << " names file '" << file << "' outside the checkpoint");
      STRATA_CHECK(has(part.key), DataCorrupt,
                   manifest_path << " lists file '" << file << "' but has no \"" << part.key << "\" tensors");
      const std::string path = (dir / file).string();
      *part.out = load_safetensors(path);
      const auto diff = detail::first_difference(
          specs_from_manifest(m[part.key], manifest_path + " \"" + part.key + "\""), detail::specs_of(*part.out));
      STRATA_CHECK(!diff, DataCorrupt, path << " does not hold what " << manifest_path << " lists: " << *diff);
    }
    ckpt.extra_json = m.contains("extra") ? m["extra"].dump() : "{}";
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(DataCorrupt, manifest_path << " has a field of the wrong type or missing (" << e.what() << ")");
  }
  return ckpt;
}

}  // namespace strata::io
