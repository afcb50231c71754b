// strata: train neural networks in C++ on one device, many devices, or many machines.
//
// One header for everything public. A complete program, fitting y = 3x - 1 with a custom loop
// (examples/linear_regression.cc):
//
//   #include <strata/strata.h>
//   using namespace strata;
//
//   int main() {
//     Generator gen(0);
//     Variable x = init::uniform({256, 1}, gen, -1.0f, 1.0f);
//     Variable y = affine(x, 3.0f, -1.0f);                       // the targets
//     Variable w(Tensor::zeros({1, 1}), /*trainable=*/true, "w");
//     Variable b(Tensor::zeros({1}), /*trainable=*/true, "b");
//     for (int step = 0; step < 200; ++step) {
//       GradientTape tape;                                         // records ops on w and b
//       Variable loss = mean(square(matmul(x, w) + b - y));
//       std::vector<Tensor> grads = tape.gradient(loss, {w, b});
//       w.assign_sub(grads[0], /*scale=*/0.5f);                    // plain SGD
//       b.assign_sub(grads[1], 0.5f);
//     }
//     // w ~ 3, b ~ -1
//   }
#pragma once

#include "strata/device.h"
#include "strata/device_stats.h"
#include "strata/dtype.h"
#include "strata/error.h"
#include "strata/gradient_tape.h"
#include "strata/init.h"
#include "strata/ops.h"
#include "strata/random.h"
#include "strata/shape.h"
#include "strata/tensor.h"
#include "strata/threading.h"
#include "strata/trace.h"
#include "strata/aggregation.h"
#include "strata/variable.h"

#include "strata/nn/functional.h"
#include "strata/nn/nn.h"

#include "strata/optim/losses.h"
#include "strata/optim/metrics.h"
#include "strata/optim/optimizers.h"
#include "strata/optim/schedules.h"

#include "strata/io/checkpoint.h"
#include "strata/io/npy.h"
#include "strata/io/safetensors.h"

#include "strata/data/autoshard.h"
#include "strata/data/convert.h"
#include "strata/data/csv.h"
#include "strata/data/dataset.h"
#include "strata/data/example.h"
#include "strata/data/idx.h"
#include "strata/data/tfrecord.h"
#include "strata/data/tfrecord_dataset.h"

#include "strata/comm/communicator.h"
#include "strata/comm/local.h"
#include "strata/distribute/input.h"
#include "strata/distribute/multi_worker.h"
#include "strata/distribute/strategies.h"
#include "strata/ps/cluster_coordinator.h"
#include "strata/ps/partitioner.h"
#include "strata/ps/remote_trainer.h"
#include "strata/ps/remote_value.h"
#include "strata/ps/server.h"
#include "strata/ps/sharded_variable.h"
#include "strata/ps/worker_server.h"
#include "strata/parallel/pipeline.h"
#include "strata/parallel/pipeline_strategy.h"
#include "strata/parallel/schedule.h"
#include "strata/parallel/tensor_parallel.h"
#include "strata/distribute/strategy.h"
#include "strata/distribute/values.h"
#include "strata/train/callbacks.h"
#include "strata/train/model.h"
#include "strata/train/onnx_export.h"
#include "strata/train/saved_model.h"
