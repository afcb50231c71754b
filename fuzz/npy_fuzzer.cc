// Fuzzes read_npy (src/io/npy.cc) on an untrusted .npy file: the header's dict parser and the size checks.
#include "fuzz_util.h"
#include "strata/io/npy.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("input.npy", fuzz::as_view(data, size));
  try {
    (void)io::read_npy(path);
  } catch (const Error&) {
  }
  return 0;
}
