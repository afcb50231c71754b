// Fuzzes read_idx (src/data/idx.cc) on an untrusted file, plain or gzipped (told from its first bytes).
#include "fuzz_util.h"
#include "strata/data/idx.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("input.idx", fuzz::as_view(data, size));
  try {
    (void)data::read_idx(path);
  } catch (const Error&) {
  }
  return 0;
}
