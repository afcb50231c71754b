// Fuzzes load_safetensors (src/io/safetensors.cc) on an untrusted file: the header length, the JSON header, the
// tensors' offsets and the CRC-32C checksums in its metadata.
#include <map>
#include <string>

#include "fuzz_util.h"
#include "strata/io/safetensors.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("input.safetensors", fuzz::as_view(data, size));
  try {
    std::map<std::string, std::string> metadata;
    (void)io::load_safetensors(path, &metadata);
  } catch (const Error&) {
  }
  return 0;
}
