// A training job described by a YAML file (`strata train JOB.yaml`): the data, the model as a list of
// layers, the loss, the optimizer, the metrics, epochs and batch size. Every key is checked when the job is
// loaded: an unknown key, a key repeated in one mapping, a value of the wrong type, a number that is not
// finite or out of its range (learning_rate > 0, momentum and betas in [0, 1), seeds and shuffle >= 0, ...;
// nothing falls back to a default silently) and an unknown layer, activation, loss, metric or optimizer
// name are each an InvalidArgument naming the file, the line and the key:
//   "job.yaml:9: optimizer.learning_rate: must be a finite number > 0, got -1"
//
//   data: {format: idx, directory: /usr/share/datasets/fashion-mnist, shuffle: 10000}
//   model:
//     - conv2d: {filters: 32, kernel_size: 3, activation: relu}
//     - max_pooling2d: {pool_size: 2}
//     - flatten
//     - dense: {units: 10}
//   loss: {name: sparse_categorical_crossentropy, from_logits: true}
//   optimizer: {name: adam, learning_rate: 0.001}   # optional schedule: {name: cosine_decay, warmup_epochs: 1}
//   metrics: [accuracy]
//   epochs: 10
//   batch_size: 64            # the GLOBAL batch: a strategy splits it across its replicas
//   steps_per_execution: 1    # optional; steps per hand-off to the replicas (FitOptions, Keras's compile())
//   strategy: mirrored        # optional; with replicas, cross_device_ops, lr_scaling, base_batch_size and
//   replicas: 2               #   warmup_epochs (see distribution.h)
//   device: gpu               # optional; one_device's cpu (default), gpu or gpu:N (see distribution.h)
//
// `data` may instead name TFRecord shards of tf.train.Example (see configs/fashion_mnist_cnn_tfrecord.yaml):
//   data: {format: tfrecord, train: [shards/train-*], test: [shards/test-*], compression: gzip,
//          x: image, y: label, image_shape: [28, 28, 1]}
//
// or, for ids (see configs/ctr_embedding.yaml, data from `strata data ctr`), an int64 list feature kept as int64:
//   data: {format: tfrecord, train: [ctr/train-*], test: [ctr/test-*], x: ids, x_dtype: int64, x_shape: [26]}
//
// or NumPy arrays (numpy.save's .npy files; x uint8, scaled by `scale`, or float32, used as it is; integer labels):
//   data: {format: npy, x: train_x.npy, y: train_y.npy, test_x: test_x.npy, test_y: test_y.npy}
//
// or arrays of one .npz archive (numpy.savez / savez_compressed), named as numpy.load names them; the names default
// to those of Keras's mnist.npz (x_train, y_train, x_test, y_test):
//   data: {format: npz, file: mnist.npz, x: x_train, y: y_train, test_x: x_test, test_y: y_test}
//
// or folders of images with one subfolder per class (keras.utils.image_dataset_from_directory: class names sorted
// are the labels; JPEG and PNG; resized bilinearly to image_size, default [256, 256]; color_mode rgb (default) or
// grayscale; uint8 pixels scaled by `scale`; shuffle > 0 shuffles the file order before decoding):
//   data: {format: image_folder, train: images/train, test: images/test, image_size: [28, 28], color_mode: grayscale}
//
// Paths are relative to the working directory. The npy and npz forms read the shape and dtype of x from the training
// x file's header (input_shape), so `strata export` needs that file too.
//
// A Transformer over the image's 28 rows as 28 tokens of 28 features (see configs/fashion_mnist_transformer.yaml):
//   model:
//     - reshape: {target_shape: [28, 28]}
//     - conv1d: {filters: 64, kernel_size: 3, padding: same}   # or dense: {units: 64}; padding valid, same or causal
//     - position_embedding: {sequence_length: 28}
//     - transformer_encoder: {num_heads: 4, intermediate_dim: 128}   # pre-norm; or multi_head_attention and
//     - layer_normalization: {epsilon: 1e-6}                         #   layer_normalization on their own
//     - global_average_pooling1d
//     - dense: {units: 10}
//
// Validation data and Keras's callbacks (`validation:`, `early_stopping:`, `model_checkpoint:`,
// `reduce_lr_on_plateau:`) are read by job_callbacks.h, which shows them.
//
// Thread-safety: a Job is a value; building from it is safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "cli/distribution.h"
#include "cli/job_callbacks.h"
#include "strata/data/dataset.h"
#include "strata/train/model.h"

namespace strata::cli {

struct DataSpec {
  std::string format = "idx";             // "idx", "tfrecord", "npy", "npz" or "image_folder"
  std::string directory;                  // idx: the directory of the four files
  std::vector<std::string> train_files;   // tfrecord: files or glob patterns; image_folder: the one folder of each
  std::vector<std::string> test_files;
  std::string file;                       // npz: the archive
  // npy: the four .npy files; npz: the names of the four arrays in `file`.
  std::string x_array, y_array, test_x_array, test_y_array;
  std::string color_mode = "rgb";         // image_folder: grayscale or rgb (image_shape is [height, width, channels])
  std::string compression;                // tfrecord: "", "gzip" or "zlib"
  std::string x_feature = "image";        // tfrecord: the Example features used as x and y
  std::string y_feature = "label";
  // tfrecord: how `x_feature` is read. "uint8": one bytes value of raw pixels decoded to image_shape, then
  // x = pixels * scale (float32); "int64": an int64 list of numel(image_shape) values (ids for an Embedding), kept
  // as int64 (no scale). The YAML key of image_shape is `image_shape` or `x_shape` (one of them).
  std::string x_dtype = "uint8";
  Shape image_shape = {28, 28, 1};
  double scale = 1.0 / 255.0;             // uint8: x = pixels * scale
  int64_t shuffle = 10000;                // shuffle buffer (0: no shuffling)
  std::optional<uint64_t> seed;           // shuffle seed (default: the job's seed)
  // How multi-worker jobs split the data (strata/data/options.h): auto, file, data or off.
  data::AutoShardPolicy auto_shard = data::AutoShardPolicy::kAuto;
};

// optimizer.schedule: the learning rate over the run, optimizer.learning_rate (after lr_scaling) its peak.
//   optimizer: {name: adamw, learning_rate: 0.002, schedule: {name: cosine_decay, warmup_epochs: 1, alpha: 0}}
// cosine_decay (Keras's CosineDecay with its linear warmup from 0): rises linearly over warmup_epochs, then decays
// to alpha * peak by a cosine over the rest of the job's epochs (--epochs included).
struct LrScheduleSpec {
  std::string name;          // "" (a constant rate) or "cosine_decay"
  double warmup_epochs = 0;  // may be fractional
  double alpha = 0;          // the final rate as a fraction of the peak
};

struct Job {
  std::string file;  // the YAML file it came from
  DataSpec data;
  YAML::Node model;  // the checked list of layers
  YAML::Node loss;
  YAML::Node optimizer;
  std::vector<std::string> metrics;
  int64_t epochs = 1;
  int64_t batch_size = 32;  // global: split across the strategy's replicas
  int64_t steps_per_execution = 1;
  uint64_t seed = 0;
  std::string checkpoint_dir;
  StrategySpec strategy;
  LrScalingSpec lr_scaling;
  LrScheduleSpec schedule;    // optimizer.schedule
  ValidationSpec validation;  // `validation:` (job_callbacks.h)
  JobCallbacks callbacks;     // `early_stopping:`, `model_checkpoint:`, `reduce_lr_on_plateau:`
  // The validation and callback sections as written (one line each), for job_fingerprint.
  std::string validation_text, callbacks_text;
};

// Reads and checks a job file.
Job load_job(const std::string& path);

// What every task of a distributed job must agree on, as text per key (compared at the rendezvous, see
// cluster::WorkerGroupOptions::fingerprint): the model's layers, the loss, the optimizer and its settings, the metrics,
// the global batch, epochs, steps per execution, lr scaling, the strategy and its options, and the data's format,
// features, shuffle buffer and auto-shard policy (not its directory: machines may keep the data in different places).
std::map<std::string, std::string> job_fingerprint(const Job& job);

// The pieces the job describes. build_model returns an unbuilt Sequential (create it inside the strategy's
// scope); compile_model compiles it, with the optimizer's learning rate scaled to the global batch as the
// job's lr_scaling says and on its optimizer.schedule (a warmup or a schedule needs `steps_per_epoch`, the training
// set's batches; 0: no warmup, and the schedule's peak as a constant, for commands that do not train).
std::shared_ptr<Sequential> build_model(const Job& job);
void compile_model(const Job& job, Model& model, int64_t steps_per_epoch = 0);
// optimizer.schedule's learning rate for a run of job.epochs epochs of `steps_per_epoch` steps, peaking at `peak`.
optim::LearningRate scheduled_learning_rate(const Job& job, float peak, int64_t steps_per_epoch);
// The optimizer the job names, at its configured learning rate (before lr_scaling).
std::shared_ptr<optim::Optimizer> make_optimizer(const Job& job);
// With `validation: {split: f}` the training set is its first floor(n * (1 - f)) records (before shuffling) and the
// validation set the rest, as Keras's validation_split; n is counted once (a pass over TFRecord files).
data::Dataset train_dataset(const Job& job);
data::Dataset test_dataset(const Job& job);
// The job's validation data, batched as the test set; nullopt without `validation:`.
std::optional<data::Dataset> validation_dataset(const Job& job);
// Reads every test record once (for TFRecord: decompressed, CRC-checked and parsed as the spec says) and
// returns how many there are; a bad one raises its error (DataCorrupt, IoError, InvalidArgument) prefixed
// with "job.yaml: data.test: ". `strata train` calls it before training so a corrupt test shard does not
// surface only after the last epoch.
int64_t check_test_data(const Job& job);
// The shape of one batch of x (batch dimension included), for building the model before training. For npy and npz
// it is read from the training x array's header (an error naming the job file when it cannot be).
Shape input_shape(const Job& job);
// The dtype of x as the data holds it: uint8 (pixels, which the job scales by data.scale into float32), float32 (used
// as it is) or int64 (ids); `strata export` puts a Rescaling in front of the model for uint8 inputs.
DType input_dtype(const Job& job);

}  // namespace strata::cli
