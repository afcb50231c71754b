// The on-disk layout of a parameter-server job's checkpoints (ps_checkpoint.h): numbered checkpoint directories
// renamed into place whole, the chief's manifest written atomically, and the litter a later save removes.
// Thread-safety: see ps_checkpoint.h.
#include "ps/ps_checkpoint.h"

#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <sstream>

#include "io/atomic_file.h"
#include "ps/proto/parameter_server.pb.h"
#include "strata/error.h"

namespace strata::ps::detail {
namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestFile = "ps_checkpoint.json";

// n for a directory entry named "ckpt-<n>" (digits only); none otherwise.
std::optional<int64_t> checkpoint_number_of(const std::string& name) {
  constexpr std::string_view prefix = "ckpt-";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() || name.size() > prefix.size() + 18) {
    return std::nullopt;
  }
  int64_t n = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

}  // namespace

std::string checkpoint_name(int64_t number) { return "ckpt-" + std::to_string(number); }

fs::path ps_checkpoint_directory(const fs::path& root, int64_t index) {
  return root / ("ps-" + std::to_string(index));
}

std::optional<PsCheckpointManifest> read_ps_manifest(const fs::path& root) {
  const fs::path path = root / kManifestFile;
  std::ifstream in(path);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return std::nullopt;
    STRATA_THROW(IoError, "cannot read " << path.string());
  }
  std::stringstream text;
  text << in.rdbuf();
  proto::PsCheckpointManifest message;
  STRATA_CHECK(google::protobuf::util::JsonStringToMessage(text.str(), &message).ok() && message.checkpoint() >= 1,
               DataCorrupt, path.string() << " is not a parameter-server checkpoint manifest");
  return PsCheckpointManifest{.checkpoint = message.checkpoint(),
                              .step = message.step(),
                              .ps_shards = {message.ps_shards().begin(), message.ps_shards().end()},
                              .job_id = message.job_id(),
                              .epochs_done = message.epochs_done(),
                              .step_in_epoch = message.step_in_epoch()};
}

void commit_ps_manifest(const fs::path& root, const PsCheckpointManifest& manifest) {
  proto::PsCheckpointManifest message;
  message.set_checkpoint(manifest.checkpoint);
  message.set_step(manifest.step);
  for (int64_t n : manifest.ps_shards) message.add_ps_shards(n);
  message.set_job_id(manifest.job_id);
  message.set_epochs_done(manifest.epochs_done);
  message.set_step_in_epoch(manifest.step_in_epoch);
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  STRATA_CHECK(google::protobuf::util::MessageToJsonString(message, &json, options).ok(), IoError,
               "cannot encode the parameter-server checkpoint manifest");
  io::detail::write_file_atomically((root / kManifestFile).string(), json);
}

std::map<std::string, Tensor> read_ps_checkpoint_values(const fs::path& root, const PsCheckpointManifest& manifest) {
  std::map<std::string, Tensor> values;
  for (size_t ps = 0; ps < manifest.ps_shards.size(); ++ps) {
    const fs::path dir = ps_checkpoint_directory(root, static_cast<int64_t>(ps)) / checkpoint_name(manifest.checkpoint);
    std::error_code ec;
    STRATA_CHECK(fs::is_directory(dir, ec), DataCorrupt,
                 "the parameter-server checkpoint " << manifest.checkpoint << " under " << root.string()
                                                    << " lacks ps:" << ps << "'s part (" << dir.string() << ")");
    int64_t shards = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().extension() != ".safetensors") continue;
      std::map<std::string, std::string> metadata;
      io::NamedTensors tensors = io::load_safetensors(entry.path().string(), &metadata);
      proto::ShardRecord record;
      STRATA_CHECK(metadata.count(kShardMetadataKey) &&
                       google::protobuf::util::JsonStringToMessage(metadata[kShardMetadataKey], &record).ok() &&
                       !tensors.empty() && tensors[0].first == "value",
                   DataCorrupt, entry.path().string() << " is not a shard file of a ps");
      values.emplace(record.name(), tensors[0].second);
      ++shards;
    }
    STRATA_CHECK(shards == manifest.ps_shards[ps], DataCorrupt,
                 dir.string() << " holds " << shards << " shard files; the manifest says ps:" << ps << " saved "
                              << manifest.ps_shards[ps]);
  }
  return values;
}

struct PsCheckpointWriter::InProgress {
  explicit InProgress(const fs::path& path) : registered(path.string()) {}
  io::detail::TempInProgress registered;
};

PsCheckpointWriter::PsCheckpointWriter(fs::path directory, int64_t number)
    : directory_(std::move(directory)), number_(number) {
  STRATA_CHECK(number >= 1, InvalidArgument, "ps checkpoint numbers start at 1, got " << number);
  std::error_code ec;
  fs::create_directories(directory_, ec);
  if (ec) STRATA_THROW(IoError, "cannot create the ps checkpoint directory " << directory_.string() << ": " << ec.message());
  temporary_ = io::detail::temp_name_for((directory_ / checkpoint_name(number)).string());
  in_progress_ = std::make_unique<InProgress>(temporary_);
  fs::create_directory(temporary_, ec);
  if (ec) STRATA_THROW(IoError, "cannot create " << temporary_.string() << ": " << ec.message());
}

PsCheckpointWriter::~PsCheckpointWriter() {
  if (published_) return;
  std::error_code ec;
  fs::remove_all(temporary_, ec);  // best effort: a later save removes what is left
}

void PsCheckpointWriter::publish(int64_t keep) {
  io::detail::fsync_directory(temporary_.string());
  const fs::path target = directory_ / checkpoint_name(number_);
  std::error_code ec;
  // A ckpt-<n> of the same number is a save the chief never committed (it died before its manifest): replaced.
  fs::remove_all(target, ec);
  if (ec) STRATA_THROW(IoError, "cannot remove the uncommitted " << target.string() << ": " << ec.message());
  fs::rename(temporary_, target, ec);
  if (ec) STRATA_THROW(IoError, "cannot rename " << temporary_.string() << " to " << target.string() << ": " << ec.message());
  published_ = true;
  io::detail::fsync_directory(directory_.string());
  // The litter: checkpoints neither committed nor this one, and temporaries of writers that died.
  std::vector<fs::path> litter;
  for (const auto& entry : fs::directory_iterator(directory_, ec)) {
    const std::optional<int64_t> n = checkpoint_number_of(entry.path().filename().string());
    if (n && *n != number_ && *n != keep) litter.push_back(entry.path());
  }
  for (const fs::path& path : litter) fs::remove_all(path, ec);  // best effort: the next save tries again
  io::detail::remove_dead_writers_temporaries(directory_.string());
}

}  // namespace strata::ps::detail
