// Fuzzes TF_CONFIG resolution (src/cluster/cluster_resolver.cc): the JSON a process finds in its environment.
#include <string>

#include "fuzz_util.h"
#include "strata/cluster/cluster_resolver.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const cluster::TaskInfo task = cluster::resolve_tf_config(std::string(fuzz::as_view(data, size)));
    (void)cluster::make_tf_config(task.cluster, task.task_type, task.task_index);
  } catch (const Error&) {
  }
  return 0;
}
