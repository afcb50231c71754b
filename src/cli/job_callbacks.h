// The job file's validation data and Keras callbacks (`validation:`, `early_stopping:`, `model_checkpoint:`,
// `reduce_lr_on_plateau:`): what they say, read and checked with the rest of the job (job.cc), and the callbacks
// they make for fit. Semantics are Keras 3's (strata/train/callbacks.h):
//
//   validation: {split: 0.1}                # the LAST 10% of the training data, before shuffling, held out
//   validation: {format: idx, directory: /data/fashion}  # or a source: IDX's test files there (t10k-*)
//   validation: {format: tfrecord, files: [val-*]}       #   or TFRecord files, read as data's (features, shape)
//   validation: {format: npy, x: val_x.npy, y: val_y.npy}             #   or .npy files
//   validation: {format: npz, file: val.npz, x: x_val, y: y_val}      #   or arrays of an .npz archive
//   validation: {format: image_folder, directory: images/val}         #   or an image folder (data's size, mode, classes)
//
// (With an image folder, split follows Keras's validation_split: the files are permuted by data.seed, default the
// job's seed, before the last fraction is held out; shuffling then reorders the training files only.)
//   early_stopping: {monitor: val_loss, patience: 3, min_delta: 0.001, mode: auto, baseline: 0.5,
//                    restore_best_weights: true}
//   model_checkpoint: {filepath: "best/ckpt-{epoch:02d}.safetensors", save_best_only: true, monitor: val_loss}
//   reduce_lr_on_plateau: {monitor: val_loss, factor: 0.5, patience: 2, cooldown: 1, min_delta: 0.0001, min_lr: 1e-5}
//
// A monitor must name a value the epoch's logs will hold: loss, a metric of the job, or either with "val_" when the
// job has validation data. Thread-safety: plain values and free functions.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/train/callbacks.h"

namespace strata::cli {

namespace detail {
class Section;
}

struct ValidationSpec {
  double split = 0;                // (0, 1): the last fraction of the training records (Keras's validation_split)
  std::string format;              // or a source of data.format's kind:
  std::string directory;           //   idx (the directory's test files), image_folder
  std::vector<std::string> files;  //   tfrecord
  std::string file, x, y;          //   npy (x and y are files), npz (file, and x and y name its arrays)
  bool enabled() const { return split > 0 || !format.empty(); }
};

struct ModelCheckpointSpec {
  std::string filepath;
  callbacks::ModelCheckpoint::Options options;
};

struct JobCallbacks {
  std::optional<callbacks::EarlyStopping::Options> early_stopping;
  std::optional<ModelCheckpointSpec> model_checkpoint;
  std::optional<callbacks::ReduceLROnPlateau::Options> reduce_lr_on_plateau;
  bool any() const { return early_stopping || model_checkpoint || reduce_lr_on_plateau; }
};

// `validation:` of the job's top section; data_format is data.format, which a source must share.
ValidationSpec read_validation(detail::Section& top, const std::string& data_format);
// The three callback sections of the job's top section, their monitors checked against the logs the job will have
// (loss, `metrics`, and "val_" ones when `validated`).
JobCallbacks read_callbacks(detail::Section& top, const std::vector<std::string>& metrics, bool validated);
// The callbacks, in the order early stopping, checkpoint, learning rate (each on every worker: only the chief
// writes or prints).
std::vector<std::shared_ptr<Callback>> make_callbacks(const JobCallbacks& spec);

}  // namespace strata::cli
