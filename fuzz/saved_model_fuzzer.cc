// Fuzzes load_model (src/train/saved_model.cc, layer_config.cc) on an untrusted saved model file: the safetensors
// container, the model_config JSON and every layer's config, and building the model it describes.
#include "fuzz_util.h"
#include "strata/train/saved_model.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("input.safetensors", fuzz::as_view(data, size));
  try {
    (void)load_model(path);
  } catch (const Error&) {
  }
  return 0;
}
