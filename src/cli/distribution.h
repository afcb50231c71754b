// How a job is distributed and how its learning rate follows the global batch: the `strategy:`, `device:`,
// `replicas:`, `cross_device_ops:`, `lr_scaling:`, `base_batch_size:` and `warmup_epochs:` keys of a job
// file and the `--strategy` / `--device` / `--replicas` / `--cross-device-ops` flags that override them.
//
//   strategy: mirrored          # one_device (the default) | mirrored | central_storage | multi_worker_mirrored |
//                               #   parameter_server (under `strata launch --chief --workers N --ps M`) | pipeline
//   stages: 2                   # pipeline: stages (threads), micro_batches: 4, schedule: 1f1b (gpipe, 1f1b,
//                               #   interleaved, zb-h1), chunks: 2 (interleaved: model chunks per stage),
//                               #   recompute: true (activations recomputed before the backward)
//                               #   | tensor_parallel (Transformer blocks, attention and Dense pairs split
//   tp: 2                       #   Megatron-style over tp ranks, threads of this process)
//   replicas: 2                 # mirrored / central_storage: CPU replicas (default: one per core); mirrored on
//                               #   device gpu: GPUs 0 .. replicas-1 (default: every visible GPU)
//   device: gpu                 # one_device: cpu (the default), gpu (GPU 0) or gpu:N; mirrored: gpu (its replicas
//                               #   on GPUs, all-reduced by NCCL); multi_worker_mirrored: gpu (each worker on its
//                               #   own GPU, the workers on nccl). A GPU needs a build with CUDA and the GPUs
//                               #   visible (`--device` overrides it)
//   cross_device_ops: ring      # mirrored: reduction_to_one_device (default; nccl on GPUs) | ring | tree | nccl
//                               #   (GPU replicas only, and the only ops there)
//   batch_size: 128             # the GLOBAL batch, split across the replicas (as in TF)
//   lr_scaling: linear          # lr = learning_rate * batch_size / base_batch_size (Goyal et al.)
//   base_batch_size: 64         # the batch the optimizer's learning_rate was tuned for (default 64)
//   warmup_epochs: 2            # ramp from learning_rate to the scaled rate over 2 epochs' steps
//
// Also the warnings for settings that run, but badly: more replicas than cores, and a global batch whose
// activations would not fit in memory.
//
// Thread-safety: plain functions of values; the strategy they make is driven by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "strata/distribute/strategies.h"  // kDefaultCrossDeviceOps
#include "strata/nn/layer.h"
#include "strata/optim/schedules.h"

namespace strata::cli {

struct StrategySpec {
  std::string name = "one_device";  // one_device, mirrored, central_storage, multi_worker_mirrored, parameter_server,
                                    // pipeline, tensor_parallel, local_sgd
  int replicas = 0;                 // 0: one_device 1; mirrored / central_storage one per core (num_threads())
  std::string cross_device_ops = distribute::kDefaultCrossDeviceOps;
  double collective_timeout_seconds = 0;  // multi_worker_mirrored: bound on every collective (0: its default)
  double rendezvous_timeout_seconds = 0;  // across workers: bound on the start-up rendezvous (0: 60 s)
  std::string gradient_compression = "none";  // multi_worker_mirrored: "none" or "bf16" on the wire
  int64_t bytes_per_pack = 0;                 // multi_worker_mirrored: gradient bucket size (0: the default)
  // parameter_server: where the ps shards are checkpointed ("" none) and how often besides each epoch's end.
  std::string ps_checkpoint_dir;
  int64_t ps_checkpoint_every_steps = 0;
  bool ps_resume = false;  // the chief continues from the directory's committed ps checkpoint
  // parameter_server: how many steps a worker may run ahead of the slowest (0: synchronous rounds; none: async).
  std::optional<int64_t> max_staleness;
  // parameter_server with 2 or more ps: each shard backed up on another ps (ParameterServerStrategyOptions).
  bool ps_backups = true;
  // pipeline: stages (threads), micro-batches per global batch, the schedule, and model chunks per stage
  // (interleaved; 0: 2).
  int pipeline_stages = 2;
  int pipeline_micro_batches = 4;
  std::string pipeline_schedule = "1f1b";
  int pipeline_chunks = 0;
  bool pipeline_recompute = false;  // stages recompute activations instead of keeping them
  // tensor_parallel: ranks (threads) the split layers are split over.
  int tensor_parallel = 2;
  // local_sgd: local steps between weight averages, and the outer step ("none": the plain average; "nesterov":
  // DiLoCo's).
  int sync_every = 8;
  std::string outer_step = "none";
  std::string device = "cpu";  // "cpu", "gpu" (one_device: GPU 0; mirrored, multi_worker_mirrored: see above) or
                               // "gpu:N" (one_device; check_device_name)
};

struct LrScalingSpec {
  std::string rule = "none";     // "none" or "linear"
  int64_t base_batch_size = 64;  // lr_scaling linear: the batch the configured learning rate is for
  double warmup_epochs = 0;      // gradual warmup from the base to the scaled rate (0: none)
};

// InvalidArgument "<where>: unknown ...; choose one of ..." unless `name` is a known choice. `where` names
// the flag ("--strategy") or the file, line and key ("job.yaml:3: strategy").
void check_strategy_name(const std::string& name, const std::string& where);
// Whether `strategy` can train on `device` (cpu; gpu for one_device, mirrored, multi_worker_mirrored; gpu:N for
// one_device); InvalidArgument prefixed by `where` ("--device ", "job.yaml:3: device: ") otherwise.
void check_strategy_device(const std::string& device, const std::string& strategy, const std::string& where);
void check_cross_device_ops(const std::string& name, const std::string& where);
void check_lr_scaling(const std::string& rule, const std::string& where);
void check_pipeline_schedule(const std::string& name, const std::string& where);
void check_outer_step(const std::string& name, const std::string& where);
// "cpu", "gpu" or "gpu:N" (N a non-negative integer); InvalidArgument naming `where` otherwise. Whether the GPU is
// there is the strategy's to say (Unavailable when it is made).
void check_device_name(const std::string& name, const std::string& where);

// The command-line overrides; empty / unset leave the job's value.
struct StrategyFlags {
  std::string strategy;
  std::optional<int> replicas;  // when given, >= 1 (`--replicas 0` is an error, not "the default")
  std::string cross_device_ops;
  std::optional<double> collective_timeout_seconds;  // when given, > 0
  std::optional<double> rendezvous_timeout_seconds;  // when given, > 0
  std::string gradient_compression;                  // when given, none or bf16
  std::optional<int64_t> bytes_per_pack;             // when given, >= 1 (multi_worker_mirrored only)
  std::optional<int64_t> max_staleness;              // when given, >= 0 (parameter_server only)
  bool no_ps_backups = false;                        // parameter_server only
  std::optional<int> stages, micro_batches, chunks;  // when given, >= 1 (pipeline only)
  std::string schedule;                              // pipeline only
  bool recompute = false;                            // pipeline only
  std::optional<int> tp;                             // when given, >= 1 (tensor_parallel only)
  std::optional<int> sync_every;                     // when given, >= 1 (local_sgd only)
  std::string outer_step;                            // local_sgd only: none or nesterov
  std::string device;                                // when given, cpu, gpu or gpu:N (gpu:N: one_device only)
};
// The job's strategy with the flags applied. A flag that contradicts the strategy it ends up with (say
// --replicas 2 with one_device, or --cross-device-ops with central_storage) is an InvalidArgument; the
// job file's replicas / cross_device_ops are ignored when --strategy picks a strategy they do not apply to.
StrategySpec resolve_strategy(const StrategySpec& from_job, const StrategyFlags& flags);

// The strategy `spec` names, with CPU replicas whose threads share the calling thread's num_threads().
// `fingerprint` (job_fingerprint) is what its workers compare at the rendezvous, for the strategies that span
// processes.
// `max_message_bytes` caps what a parameter_server job's ps and worker tasks take per message (0: any size).
std::unique_ptr<distribute::Strategy> make_job_strategy(const StrategySpec& spec,
                                                        std::map<std::string, std::string> fingerprint = {},
                                                        int64_t max_message_bytes = 0);
// "strategy: MirroredStrategy, 2 replicas (1 thread each), global batch 128".
std::string strategy_line(const distribute::Strategy& strategy, int64_t global_batch);

// The rate an optimizer configured with `base_lr` trains at: base_lr unless lr_scaling is linear, then
// scale_lr(base_lr, global_batch, base_batch_size); with warmup_epochs W > 0 and steps_per_epoch > 0 it
// rises linearly from base_lr at step 0 to the scaled rate at ceil(W * steps_per_epoch) steps, and stays
// there (Goyal et al.'s gradual warmup).
optim::LearningRate scaled_learning_rate(const LrScalingSpec& spec, float base_lr, int64_t global_batch,
                                         int64_t steps_per_epoch);
// The number of warmup steps scaled_learning_rate uses.
int64_t warmup_steps(const LrScalingSpec& spec, int64_t steps_per_epoch);
// "more replicas (8) than CPU cores (2): replicas are threads and will take turns on the cores; training
// runs, slower than with 2", or "" when `replicas` <= `cores` (or either is 0: the default, or unknown).
std::string replicas_warning(int replicas, unsigned cores);

// A rough peak of the memory a training step's activations take, in bytes: every layer's output elements
// per example (leaf layers; the model must be built) x the global batch (all replicas share this process)
// x 4 bytes (float32) x 3 (the forward value, its gradient, and about as much workspace: im2col buffers,
// saved masks). Weights and optimizer slots are not counted; they do not grow with the batch.
int64_t activation_bytes(const nn::Layer& model, int64_t global_batch);
// Memory the system can give without swapping: /proc/meminfo's MemAvailable, else
// sysconf(_SC_AVPHYS_PAGES) x the page size (free pages only); 0 when neither is known.
int64_t available_memory_bytes();
// "global batch 4096: its activations need about 12.3 GiB (estimate) but 7.5 GiB of memory is available;
// expect swapping or an out-of-memory kill (lower batch_size)", or "" when needed <= available or
// available is 0 (unknown).
std::string batch_memory_warning(int64_t needed, int64_t available, int64_t global_batch);

// "learning rate: 0.001 -> 0.002 (linear scaling: global batch 128 / base 64), warmup 2 epochs (938 steps)",
// or "" when the job neither scales nor warms up.
std::string learning_rate_line(const LrScalingSpec& spec, float base_lr, int64_t global_batch, int64_t steps_per_epoch);

}  // namespace strata::cli
