// strata.distribute's native half: OneDeviceStrategy, MirroredStrategy and MultiWorkerMirroredStrategy, and a
// strategy's scope as an object whose close() ends it (the Python `with strategy.scope():` of python/strata/distribute.py opens and closes it).
// Thread-safety: as strata::distribute::Strategy: one thread drives a strategy, and a scope is closed on the thread
// that opened it (a `with` block guarantees it).
#include <memory>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "cli/core_share.h"
#include "strata/distribute/multi_worker.h"
#include "strata/distribute/strategies.h"
#include "strata/distribute/strategy.h"

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

}  // namespace

void define_strategies(nb::module_& m) {
  nb::class_<ScopeHandle>(m, "StrategyScope").def("close", &ScopeHandle::close);

  nb::class_<distribute::Strategy>(m, "Strategy")
      .def_prop_ro("name", &distribute::Strategy::name)
      .def_prop_ro("num_replicas_in_sync", &distribute::Strategy::num_replicas_in_sync)
      .def_prop_ro("devices", &distribute::Strategy::devices)
      .def(
          "enter_scope", [](distribute::Strategy& s) { return std::make_unique<ScopeHandle>(s); },
          nb::keep_alive<0, 1>(), "Opens the strategy's scope on this thread until the returned object's close().");

  nb::class_<distribute::OneDeviceStrategy, distribute::Strategy>(m, "OneDeviceStrategy")
      .def(nb::init<const std::string&>(), "device"_a = "/cpu:0");
  nb::class_<distribute::MirroredStrategy, distribute::Strategy>(m, "MirroredStrategy")
      .def(
          "__init__",
          [](distribute::MirroredStrategy* self, std::vector<std::string> devices) {
            new (self) distribute::MirroredStrategy(std::move(devices));
          },
          "devices"_a = std::vector<std::string>{});
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
