// Reading whatever a `strata train` run saved into a model built from its job, for `strata evaluate` and
// `strata export`: a parameter-server job's --checkpoint-dir (its shards reassembled), a checkpoint directory (its
// latest ckpt-N: one device, mirrored, multi-worker, pipeline), one ckpt-N directory, or a weights file.
//
// Thread-safety: call from one thread; it writes the model's variables.
#pragma once

#include <string>

#include "strata/train/model.h"

namespace strata::cli {

// REQUIRES: `model` is built from the job the checkpoint came from. IoError naming `path` when nothing is there;
// otherwise the errors of ps::load_ps_checkpoint, Model::restore_checkpoint or Model::load_weights.
void load_job_checkpoint(Model& model, const std::string& path);

}  // namespace strata::cli
