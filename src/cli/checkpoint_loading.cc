// Reading a `strata train` run's checkpoint of any kind into a model (see checkpoint_loading.h).
//
// Thread-safety: no shared state.
#include "cli/checkpoint_loading.h"

#include <sys/stat.h>

#include <filesystem>

#include "strata/error.h"
#include "strata/ps/remote_trainer.h"

namespace strata::cli {

void load_job_checkpoint(Model& model, const std::string& path) {
  namespace fs = std::filesystem;
  struct stat st {};
  STRATA_CHECK(::stat(path.c_str(), &st) == 0, IoError, "no checkpoint at '" << path << "'");
  if (S_ISDIR(st.st_mode) && fs::exists(fs::path(path) / "ps_checkpoint.json")) {
    ps::load_ps_checkpoint(model, path);  // a parameter-server job's: its shards reassembled
  } else if (S_ISDIR(st.st_mode)) {
    model.restore_checkpoint(path);
  } else {
    model.load_weights(path);
  }
}

}  // namespace strata::cli
