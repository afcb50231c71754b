// strata.distribute's native half: OneDeviceStrategy, MirroredStrategy, CentralStorageStrategy, PipelineStrategy and
// MultiWorkerMirroredStrategy (ParameterServerStrategy is parameter_server.cc), and a strategy's scope as an object
// whose close() ends it (the Python `with strategy.scope():` of python/strata/distribute.py opens and closes it).
// Also what custom loops use: run (a Python function on every replica's thread), reduce, and
// experimental_distribute_dataset with its iterator of per-replica numpy batches.
// Thread-safety: as strata::distribute::Strategy: one thread drives a strategy, and a scope is closed on the thread
// that opened it (a `with` block guarantees it). run's replica threads take the GIL only while they run Python.
#include <chrono>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "arrays.h"
#include "bindings.h"
#include "strata/data/dataset.h"
#include "strata/distribute/input.h"
#include "strata/error.h"
#include "cli/core_share.h"
#include "strata/distribute/multi_worker.h"
#include "strata/distribute/strategies.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/distribute/strategy.h"
#include "strata/parallel/pipeline_strategy.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace strata::python {
namespace {

// An open Strategy::Scope until close() (or the object's end).
class ScopeHandle {
 public:
  explicit ScopeHandle(distribute::Strategy& strategy) : scope_(new distribute::Strategy::Scope(strategy.scope())) {}
  void close() { scope_.reset(); }

 private:
  std::unique_ptr<distribute::Strategy::Scope> scope_;
};

// A DistributedDataset's iterator: each next() is the global batch split over the replicas, one list of numpy arrays
// (and the element's names) per replica, or None at the end.
class PyDistributedIterator {
 public:
  PyDistributedIterator(const distribute::DistributedDataset& dataset) {
    nb::gil_scoped_release released;
    it_.emplace(dataset.make_iterator());
  }
  ~PyDistributedIterator() {
    nb::gil_scoped_release released;
    it_.reset();
  }

  std::optional<std::pair<std::vector<std::vector<nb::object>>, std::vector<std::string>>> next() {
    std::optional<distribute::PerReplica<data::Element>> batch;
    {
      nb::gil_scoped_release released;
      batch = it_->next();
    }
    if (!batch) return std::nullopt;
    std::vector<std::vector<nb::object>> replicas;
    std::vector<std::string> names;
    for (const data::Element& element : batch->values()) {
      std::vector<nb::object> arrays;
      for (const Tensor& t : element.components()) arrays.push_back(numpy_from_tensor(t));
      replicas.push_back(std::move(arrays));
      names = element.names();
    }
    return std::make_pair(std::move(replicas), std::move(names));
  }

 private:
  std::optional<distribute::DistributedIterator> it_;
};

// Strategy::run with a Python function: `call(replica)` runs on every replica's thread (the calling thread with one
// replica) in its replica context, taking the GIL for the Python parts; the driving thread waits without it. The
// results come back in replica order. An exception in one replica stops the others (run_replicas) and is raised
// here as it was raised there.
std::vector<nb::object> run_on_replicas(distribute::Strategy& strategy, nb::object call) {
  const auto replicas = static_cast<size_t>(strategy.num_local_replicas());
  std::vector<nb::object> results(replicas);
  std::unique_ptr<nb::python_error> failure;
  {
    nb::gil_scoped_release released;
    try {
      strategy.run_replicas([&](int replica) {
        nb::gil_scoped_acquire gil;
        try {
          results[static_cast<size_t>(replica)] = call(replica);
        } catch (nb::python_error& e) {
          if (!failure) failure = std::make_unique<nb::python_error>(std::move(e));
          STRATA_THROW(InvalidArgument, "strategy.run: the step function raised on replica " << replica);
        }
      });
    } catch (const Error&) {
      if (!failure) throw;
    }
  }
  if (failure) {
    nb::python_error error = std::move(*failure);
    failure.reset();
    throw error;
  }
  return results;
}

}  // namespace

void define_strategies(nb::module_& m) {
  nb::class_<ScopeHandle>(m, "StrategyScope").def("close", &ScopeHandle::close);

  nb::class_<distribute::Strategy>(m, "Strategy")
      .def_prop_ro("name", &distribute::Strategy::name)
      .def_prop_ro("num_replicas_in_sync", &distribute::Strategy::num_replicas_in_sync)
      .def_prop_ro("devices", &distribute::Strategy::devices)
      .def(
          "enter_scope", [](distribute::Strategy& s) { return std::make_unique<ScopeHandle>(s); },
          nb::keep_alive<0, 1>(), "Opens the strategy's scope on this thread until the returned object's close().")
      .def_prop_ro("num_local_replicas", &distribute::Strategy::num_local_replicas)
      .def("run_on_replicas", &run_on_replicas, "call"_a)
      // Strategy::reduce of one value per replica ("SUM" or "MEAN"; axis None: element-wise over the replicas).
      .def(
          "reduce",
          [](distribute::Strategy& s, const std::string& op, nb::list values, std::optional<int> axis) {
            STRATA_CHECK(op == "SUM" || op == "MEAN", InvalidArgument,
                         "reduce: reduce_op is 'SUM' or 'MEAN' (strata.distribute.ReduceOp), got '" << op << "'");
            std::vector<Tensor> tensors;
            for (nb::handle value : values) tensors.push_back(variable_from(value, "reduce value").value());
            Tensor out;
            {
              nb::gil_scoped_release released;
              out = s.reduce(op == "SUM" ? distribute::ReduceOp::kSum : distribute::ReduceOp::kMean,
                             distribute::PerReplica<Tensor>(std::move(tensors)), axis);
            }
            return numpy_from_tensor(std::move(out));
          },
          "op"_a, "values"_a, "axis"_a.none() = nb::none())
      .def(
          "experimental_distribute_dataset",
          [](const distribute::Strategy& s, const data::Dataset& dataset) {
            return s.experimental_distribute_dataset(dataset);
          },
          nb::keep_alive<0, 1>(), "dataset"_a);

  nb::class_<PyDistributedIterator>(m, "DistributedIterator").def("next", &PyDistributedIterator::next);
  nb::class_<distribute::DistributedDataset>(m, "DistributedDataset")
      .def_prop_ro("num_replicas", &distribute::DistributedDataset::num_replicas)
      .def(
          "make_iterator",
          [](const distribute::DistributedDataset& d) { return std::make_unique<PyDistributedIterator>(d); },
          nb::keep_alive<0, 1>());

  nb::class_<distribute::OneDeviceStrategy, distribute::Strategy>(m, "OneDeviceStrategy")
      .def(nb::init<const std::string&>(), "device"_a = "/cpu:0");
  nb::class_<distribute::MirroredStrategy, distribute::Strategy>(m, "MirroredStrategy")
      .def(
          "__init__",
          [](distribute::MirroredStrategy* self, std::vector<std::string> devices) {
            new (self) distribute::MirroredStrategy(std::move(devices));
          },
          "devices"_a = std::vector<std::string>{});
  // One copy of each variable on the host; replicas "/cpu:0", "/cpu:1", ... (none given: one per core, as
  // MirroredStrategy).
  nb::class_<distribute::CentralStorageStrategy, distribute::Strategy>(m, "CentralStorageStrategy")
      .def(
          "__init__",
          [](distribute::CentralStorageStrategy* self, std::vector<std::string> devices) {
            new (self) distribute::CentralStorageStrategy(std::move(devices));
          },
          "devices"_a = std::vector<std::string>{});
  // A Sequential model's training steps as a pipeline of stages (threads of this process), one pipeline replica per
  // worker of the cluster from TF_CONFIG (as `strata train --strategy pipeline` under `strata launch`; none: one
  // process). As MultiWorkerMirroredStrategy's, the process first takes its share of the host's cores, and the
  // rendezvous runs without the GIL.
  nb::class_<parallel::PipelineStrategy, distribute::Strategy>(m, "PipelineStrategy")
      .def(
          "__init__",
          [](parallel::PipelineStrategy* self, int stages, int micro_batches, std::string schedule, int chunks,
             std::vector<int> bounds, std::string balance, bool recompute, std::string implementation,
             int64_t bytes_per_pack, double timeout_seconds) {
            parallel::PipelineStrategyOptions options{.stages = stages,
                                                      .micro_batches = micro_batches,
                                                      .schedule = std::move(schedule),
                                                      .chunks = chunks,
                                                      .bounds = std::move(bounds),
                                                      .balance = std::move(balance),
                                                      .recompute = recompute};
            distribute::CommunicationOptions communication;
            communication.implementation = std::move(implementation);
            communication.bytes_per_pack = bytes_per_pack;
            communication.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
            nb::gil_scoped_release release;
            cli::apply_core_share(/*threads_flag=*/0);
            new (self) parallel::PipelineStrategy(std::move(options), cluster::resolve_cluster_from_environment(),
                                                  std::move(communication));
          },
          "stages"_a, "micro_batches"_a, "schedule"_a, "chunks"_a, "bounds"_a, "balance"_a, "recompute"_a,
          "implementation"_a, "bytes_per_pack"_a, "timeout_seconds"_a)
      .def_prop_ro("num_workers", &parallel::PipelineStrategy::num_workers)
      .def_prop_ro("worker_index", &parallel::PipelineStrategy::worker_index)
      .def_prop_ro("layout", &parallel::PipelineStrategy::layout)
      .def("describe", &parallel::PipelineStrategy::describe);
  // The cluster from TF_CONFIG (as `strata launch` or `python -m strata.launch` sets it), mpirun or torchrun. As the
  // strata CLI does, this process first takes its share of the host's cores (cli/core_share.h: co-located workers
  // never each take every core), unless STRATA_NUM_THREADS says otherwise. The rendezvous runs without the GIL.
  nb::class_<distribute::MultiWorkerMirroredStrategy, distribute::Strategy>(m, "MultiWorkerMirroredStrategy")
      .def(
          "__init__",
          [](distribute::MultiWorkerMirroredStrategy* self, std::string implementation, int64_t bytes_per_pack,
             double timeout_seconds) {
            distribute::CommunicationOptions options;
            options.implementation = std::move(implementation);
            options.bytes_per_pack = bytes_per_pack;
            options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
            nb::gil_scoped_release release;
            cli::apply_core_share(/*threads_flag=*/0);
            new (self) distribute::MultiWorkerMirroredStrategy(std::move(options));
          },
          "implementation"_a = "auto", "bytes_per_pack"_a = int64_t{25} << 20, "timeout_seconds"_a = 300.0)
      .def_prop_ro("num_workers", &distribute::MultiWorkerMirroredStrategy::num_workers)
      .def_prop_ro("worker_index", &distribute::MultiWorkerMirroredStrategy::worker_index)
      .def_prop_ro("backend", &distribute::MultiWorkerMirroredStrategy::backend);
}

}  // namespace strata::python
