// Fuzzes the job file reader of `strata train JOB.yaml` (src/cli/job.cc, job_section.h): YAML parsing and the check
// of every key, then the model it describes (its layers made, not built) and the input shape.
#include "cli/job.h"
#include "fuzz_util.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("job.yaml", fuzz::as_view(data, size));
  try {
    const cli::Job job = cli::load_job(path);
    (void)cli::build_model(job);
    (void)cli::input_shape(job);
  } catch (const Error&) {
  }
  return 0;
}
