// Training step time of the models in issue 37's table, on one device: the tutorial CNN (batch 64 and 1024), an MLP
// 784-4096-4096-10 (batch 512) and a ResNet-20-style network on 32x32x3 images (batch 256), each with Adam and sparse
// categorical cross-entropy from logits, on synthetic data already on the device. bench/gpu_bench.py runs it beside
// the same models in PyTorch; scripts/gpu_check.sh runs that on a GPU machine.
//
//   gpu_bench [--device cpu|gpu] [--steps 50] [--warmup 10] [--models cnn64,cnn1024,mlp512,resnet256] [--json]
//             [--threads N] [--precisions fp32,bf16]
//
// Each model trains under OneDeviceStrategy("/gpu:0") (or "/cpu:0"): its variables live on that device and every
// step is Model::train_step inside strategy.run, as fit's runner drives it, without fit's input pipeline. After
// --warmup steps, --steps steps are timed on the wall clock; the clock is read once the device has finished (the
// last step's loss is already on the host, and a trained weight is copied back to it). --precisions (default fp32)
// times each model once per precision: fp32, and bf16 under the mixed_bfloat16 policy (nn/policy.h: bf16 products
// and convolutions, float32 variables and loss). One line per model and precision: model, batch, device, precision,
// ms/step, images/s; with --json one JSON object each instead. A model that fails is named on stderr and the others
// still run; the exit status is then 1.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/device_memory.h"  // detail::cuda_device_count: strata has no public "is a GPU visible" query yet
#include "strata/data/element.h"
#include "strata/distribute/strategies.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/random.h"
#include "strata/threading.h"
#include "strata/train/model.h"

using namespace strata;

namespace {

struct Spec {
  std::string name;   // the --models key
  std::string model;  // the table's model name
  int64_t batch;
  Shape image;  // one example's shape (no batch dimension)
};

const std::vector<Spec>& specs() {
  static const std::vector<Spec> all = {
      {"cnn64", "tutorial_cnn", 64, {28, 28, 1}},
      {"cnn1024", "tutorial_cnn", 1024, {28, 28, 1}},
      {"mlp512", "mlp_784_4096_4096_10", 512, {784}},
      {"resnet256", "resnet20", 256, {32, 32, 3}},
  };
  return all;
}

// The Keras tutorial CNN, as configs/fashion_mnist_cnn.yaml describes it.
std::shared_ptr<Model> tutorial_cnn() {
  return std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Conv2D(32, 3, "relu"), nn::MaxPool2D(2),
                                                                nn::Flatten(), nn::Dense(64, "relu"), nn::Dense(10)});
}

std::shared_ptr<Model> mlp() {
  return std::make_shared<Sequential>(
      std::vector<nn::LayerRef>{nn::Dense(4096, "relu"), nn::Dense(4096, "relu"), nn::Dense(10)});
}

nn::SymbolicTensor conv_bn(const nn::SymbolicTensor& x, int64_t filters, int64_t kernel, int64_t strides) {
  const nn::SymbolicTensor y =
      nn::Conv2D(filters, kernel, {.strides = strides, .padding = "same", .use_bias = false})(x);
  return nn::BatchNormalization()(y);
}

// ResNet-20 for 32x32 images (He et al. 2016, section 4.2): a 3x3 conv of 16 filters, then 3 stages of 3 basic
// blocks with 16, 32 and 64 filters (the first block of stages 2 and 3 halves the image with stride 2, its shortcut
// a 1x1 projection), global average pooling, Dense 10.
std::shared_ptr<Model> resnet20() {
  const nn::SymbolicTensor input = nn::Input({32, 32, 3});
  nn::SymbolicTensor x = nn::Activation("relu")(conv_bn(input, 16, 3, 1));
  for (const int64_t filters : {16, 32, 64}) {
    for (int block = 0; block < 3; ++block) {
      const int64_t strides = (block == 0 && filters != 16) ? 2 : 1;
      nn::SymbolicTensor y = nn::Activation("relu")(conv_bn(x, filters, 3, strides));
      y = conv_bn(y, filters, 3, 1);
      const nn::SymbolicTensor shortcut = strides == 1 ? x : conv_bn(x, filters, 1, strides);
      x = nn::Activation("relu")(nn::Add()({y, shortcut}));
    }
  }
  const nn::SymbolicTensor logits = nn::Dense(10)(nn::GlobalAveragePooling2D()(x));
  return std::make_shared<Model>(std::vector<nn::SymbolicTensor>{input}, logits, "resnet20");
}

std::shared_ptr<Model> make_model(const Spec& spec) {
  if (spec.model == "tutorial_cnn") return tutorial_cnn();
  if (spec.model == "mlp_784_4096_4096_10") return mlp();
  return resnet20();
}

// A batch of standard-normal images and labels in [0, 10), made on the host and copied to `device` once.
data::Element synthetic_batch(const Spec& spec, Device device) {
  Shape shape{spec.batch};
  shape.insert(shape.end(), spec.image.begin(), spec.image.end());
  Generator gen(7);
  Tensor x = Tensor::empty(shape);
  gen.fill_normal(x.data<float>(), x.numel(), 0.0f, 1.0f);
  std::vector<int64_t> labels(static_cast<size_t>(spec.batch));
  for (auto& l : labels) l = static_cast<int64_t>(gen.uniform_int(10));
  const Tensor y = Tensor::from_vector(labels);
  return data::Element({x.to(device), y.to(device)});
}

struct Result {
  double ms_per_step = 0, images_per_s = 0, last_loss = 0;
};

Result time_model(const Spec& spec, const std::string& device_name, Device device, int64_t warmup, int64_t steps) {
  manual_seed(0);
  distribute::OneDeviceStrategy strategy(device_name);
  std::shared_ptr<Model> model;
  {
    auto scope = strategy.scope();  // the variables are made on the strategy's device
    model = make_model(spec);
    model->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::Adam());
    Shape input{spec.batch};
    input.insert(input.end(), spec.image.begin(), spec.image.end());
    model->build_for(input);
  }
  const data::Element batch = synthetic_batch(spec, device);
  const auto step = [&](const data::Element& b) { return model->train_step(b); };
  const auto run_steps = [&](int64_t n) {
    double loss = 0;
    for (int64_t i = 0; i < n; ++i) loss = strategy.run(step, batch).values()[0];
    // The loss came back to the host already; a weight's copy to the host waits for the last update too.
    (void)model->trainable_variables().back().value().to(Device::cpu());
    return loss;
  };
  run_steps(warmup);
  const auto t0 = std::chrono::steady_clock::now();
  const double loss = run_steps(steps);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Result r;
  r.ms_per_step = 1e3 * seconds / static_cast<double>(steps);
  r.images_per_s = static_cast<double>(spec.batch * steps) / seconds;
  r.last_loss = loss;
  return r;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "gpu_bench: " << why
            << "\nusage: gpu_bench [--device cpu|gpu] [--steps N] [--warmup N] "
               "[--models cnn64,cnn1024,mlp512,resnet256] [--json] [--threads N] [--precisions fp32,bf16]\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  const bool gpu_visible = detail::cuda_device_count() > 0;
  std::string device = gpu_visible ? "gpu" : "cpu";
  int64_t steps = 50, warmup = 10;
  int threads = 0;
  bool json = false;
  std::vector<std::string> wanted = {"cnn64", "cnn1024", "mlp512", "resnet256"};
  std::vector<std::string> precisions = {"fp32"};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--json") {
      json = true;
      continue;
    }
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    try {
      if (flag == "--device") device = value;
      else if (flag == "--steps") steps = std::stoll(value);
      else if (flag == "--warmup") warmup = std::stoll(value);
      else if (flag == "--threads") threads = std::stoi(value);
      else if (flag == "--models") wanted = split_commas(value);
      else if (flag == "--precisions") precisions = split_commas(value);
      else usage("unknown flag " + flag);
    } catch (const std::logic_error&) {
      usage(flag + ": not a number: '" + value + "'");
    }
  }
  if (device != "cpu" && device != "gpu") usage("--device must be cpu or gpu, got '" + device + "'");
  if (steps < 1 || warmup < 0) usage("--steps must be positive and --warmup not negative");
  for (const std::string& p : precisions)
    if (p != "fp32" && p != "bf16") usage("--precisions takes fp32 and bf16, got '" + p + "'");
  if (threads > 0) set_num_threads(threads);
  const std::string device_name = device == "gpu" ? "/gpu:0" : "/cpu:0";
  const Device placement = device == "gpu" ? Device::cuda(0) : Device::cpu();

  std::vector<const Spec*> chosen;
  for (const std::string& name : wanted) {
    const Spec* spec = nullptr;
    for (const Spec& s : specs())
      if (s.name == name) spec = &s;
    if (spec == nullptr) usage("unknown model '" + name + "' (cnn64, cnn1024, mlp512, resnet256)");
    chosen.push_back(spec);
  }
  bool failed = false;
  for (const Spec* spec : chosen) {
    for (const std::string& precision : precisions) {
      const std::string& name = spec->name;
      nn::set_global_policy(precision == "bf16" ? "mixed_bfloat16" : "float32");
      Result r;
      try {
        r = time_model(*spec, device_name, placement, warmup, steps);
      } catch (const std::exception& e) {
        // The other models still run: one missing GPU kernel should not hide the rest of the table.
        std::cerr << "gpu_bench: " << name << " " << precision << " on " << device_name << ": " << e.what() << "\n";
        failed = true;
        continue;
      }
      if (json) {
        std::printf(
            "{\"model\": \"%s\", \"key\": \"%s\", \"precision\": \"%s\", \"batch\": %lld, \"device\": \"%s\", "
            "\"ms_per_step\": %.4f, \"images_per_s\": %.1f, \"steps\": %lld, \"loss\": %.5f}\n",
            spec->model.c_str(), spec->name.c_str(), precision.c_str(), static_cast<long long>(spec->batch),
            device.c_str(), r.ms_per_step, r.images_per_s, static_cast<long long>(steps), r.last_loss);
      } else {
        std::printf("%-22s batch %5lld  %s  %s  %9.3f ms/step  %10.0f images/s\n", spec->model.c_str(),
                    static_cast<long long>(spec->batch), device.c_str(), precision.c_str(), r.ms_per_step,
                    r.images_per_s);
      }
      std::fflush(stdout);
    }
  }
  nn::set_global_policy("float32");
  return failed ? 1 : 0;
}
