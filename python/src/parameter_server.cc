// strata.distribute's parameter-server half: ParameterServerStrategy (ps::ParameterServerStrategy) made from a
// TF_CONFIG document that python/strata/cluster_resolver.py writes from a cluster resolver, and the variable
// partitioners of tf.distribute.experimental.partitioners. On a ps task the strategy's constructor starts the ps's
// gRPC server; join() waits until stop(). Python's strata.distribute.Server is a ps task's strategy and its join().
// Thread-safety: as ps::ParameterServerStrategy: one thread drives it; join() and stop() may be called from any
// thread. The constructor (which may start a server) and join() run without the GIL.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "cli/core_share.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/distribute/strategy.h"
#include "strata/error.h"
#include "strata/ps/parameter_server_strategy.h"
#include "strata/ps/partitioner.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace strata::python {

void define_parameter_server(nb::module_& m) {
  nb::class_<ps::Partitioner>(m, "Partitioner")
      .def(
          "partitions",
          [](const ps::Partitioner& p, const std::vector<int64_t>& shape) {
            return p.partitions(Shape(shape), DType::kFloat32);
          },
          "shape"_a, "Shards on each axis of a float32 variable of `shape` (TensorFlow's partitioner result).");
  nb::class_<ps::FixedShardsPartitioner, ps::Partitioner>(m, "FixedShardsPartitioner")
      .def(nb::init<int64_t>(), "num_shards"_a);
  nb::class_<ps::MinSizePartitioner, ps::Partitioner>(m, "MinSizePartitioner")
      .def(
          "__init__",
          [](ps::MinSizePartitioner* self, int64_t min_shard_bytes, int64_t max_shards) {
            new (self) ps::MinSizePartitioner({.min_shard_bytes = min_shard_bytes, .max_shards = max_shards});
          },
          "min_shard_bytes"_a, "max_shards"_a);
  nb::class_<ps::MaxSizePartitioner, ps::Partitioner>(m, "MaxSizePartitioner")
      .def(
          "__init__",
          [](ps::MaxSizePartitioner* self, int64_t max_shard_bytes, std::optional<int64_t> max_shards) {
            new (self) ps::MaxSizePartitioner({.max_shard_bytes = max_shard_bytes, .max_shards = max_shards});
          },
          "max_shard_bytes"_a, "max_shards"_a.none());

  // `tf_config`: the task's TF_CONFIG (cluster and task), as cluster::resolve_tf_config reads it. As the strata CLI
  // and MultiWorkerMirroredStrategy do, this process first takes its share of the host's cores (a ps task and the
  // chief one thread: they mostly wait), unless STRATA_NUM_THREADS says otherwise.
  nb::class_<ps::ParameterServerStrategy, distribute::Strategy>(m, "ParameterServerStrategy")
      .def(
          "__init__",
          [](ps::ParameterServerStrategy* self, const std::string& tf_config,
             std::shared_ptr<ps::Partitioner> partitioner, std::optional<int64_t> max_staleness,
             double ps_timeout_seconds, double rendezvous_timeout_seconds) {
            const cluster::TaskInfo task = cluster::resolve_tf_config(tf_config);
            ps::ParameterServerStrategyOptions options;
            options.partitioner = std::move(partitioner);
            options.coordinator.max_staleness = max_staleness;
            options.ps_timeout = std::chrono::milliseconds(static_cast<int64_t>(ps_timeout_seconds * 1000));
            options.rendezvous_timeout =
                std::chrono::milliseconds(static_cast<int64_t>(rendezvous_timeout_seconds * 1000));
            nb::gil_scoped_release release;
            cli::apply_core_share(/*threads_flag=*/0);
            new (self) ps::ParameterServerStrategy(task, std::move(options));
          },
          "tf_config"_a, "partitioner"_a.none(), "max_staleness"_a.none(), "ps_timeout_seconds"_a,
          "rendezvous_timeout_seconds"_a)
      .def_prop_ro("task_type", &ps::ParameterServerStrategy::task_type)
      .def_prop_ro("task_index", &ps::ParameterServerStrategy::task_index)
      .def_prop_ro("address", [](const ps::ParameterServerStrategy& s) { return s.task().address; })
      .def_prop_ro("num_worker_tasks", &ps::ParameterServerStrategy::num_worker_tasks)
      .def_prop_ro("num_ps", &ps::ParameterServerStrategy::num_ps)
      .def("join", &ps::ParameterServerStrategy::join, nb::call_guard<nb::gil_scoped_release>(),
           "A ps task: serves its variables until stop().")
      .def("stop", &ps::ParameterServerStrategy::stop, nb::call_guard<nb::gil_scoped_release>())
      // The chief, after fit: each worker's steps run and calls lost, from the coordinator.
      .def("worker_status", [](ps::ParameterServerStrategy& s) {
        STRATA_CHECK(s.is_chief(), InvalidArgument,
                     "worker_status: only the chief coordinates the workers; this is " << s.task().name());
        nb::list out;
        for (const ps::WorkerStatus& w : s.coordinator().worker_status()) {
          nb::dict d;
          d["address"] = w.address;
          d["up"] = w.up;
          d["steps_run"] = w.closures_run;
          d["calls_lost"] = w.times_lost;
          out.append(d);
        }
        return out;
      });
}

}  // namespace strata::python
