// Times strata's GPU kernels one by one on the shapes of issue 37's models (the tutorial CNN's convolution, pooling
// and dense layers at batch 64 and 1024; ResNet-20's 3x3 convolutions, batch norm forward, inference and backward,
// residual add, relu and bias gradient at batch 256), so that a slow step in bench/gpu_bench can be pinned on one op.
// Prints one "op<TAB>shape<TAB>ms" line per op (median of --reps runs, each ended by a device synchronisation).
// Without a GPU it says so and exits 0.
//
//   gpu_ops_bench [--reps 20]
//
// Thread-safety: a single-threaded driver.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/device_memory.h"
#include "kernels/kernels.h"
#include "strata/random.h"

namespace {

using namespace strata;
namespace k = strata::kernels;

Tensor random_on(const Shape& shape, Device device, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  gen.fill_uniform(t.data<float>(), t.numel(), -1.0f, 1.0f);
  return t.to(device);
}

// A device synchronisation: a one-element copy to the host waits for the stream.
void sync(const Tensor& t) { (void)t.reshape({t.numel()}).slice(0, 1).to(Device::cpu()); }

void time_op(const char* op, const std::string& shape, int reps, const std::function<Tensor()>& f) {
  for (int i = 0; i < 3; ++i) sync(f());
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    sync(f());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  std::printf("%s\t%s\t%.4f\n", op, shape.c_str(), ms[ms.size() / 2]);
  std::fflush(stdout);
}

void conv_ops(const char* name, Shape x_shape, Shape w_shape, k::Conv2DParams p, int reps, Device d) {
  const Tensor x = random_on(x_shape, d, 1);
  const Tensor w = random_on(w_shape, d, 2);
  const Tensor b = random_on({w_shape[3]}, d, 3);
  const Tensor y = k::conv2d(x, w, b, p);
  const Tensor dy = random_on(y.shape(), d, 4);
  const std::string s = std::string(name) + " x" + x.shape_str() + " w" + w.shape_str();
  time_op("conv2d", s, reps, [&] { return k::conv2d(x, w, b, p); });
  time_op("conv2d_backward_input", s, reps, [&] { return k::conv2d_backward_input(dy, w, x_shape, p); });
  time_op("conv2d_backward_weights", s, reps, [&] { return k::conv2d_backward_weights(x, dy, w_shape, true, p).dw; });
}

void bn_ops(const char* shape, const Shape& x_shape, int reps, Device d, uint64_t seed) {
  const int64_t c = x_shape.back();
  const Tensor x = random_on(x_shape, d, seed);
  const Tensor gamma = random_on({c}, d, seed + 1);
  const Tensor beta = random_on({c}, d, seed + 2);
  const Tensor dy = random_on(x_shape, d, seed + 3);
  const k::BatchNormResult r = k::batch_norm_training(x, gamma, beta, 1e-3f);
  time_op("batch_norm_training", shape, reps, [&] { return k::batch_norm_training(x, gamma, beta, 1e-3f).y; });
  time_op("batch_norm_inference", shape, reps,
          [&] { return k::batch_norm_inference(x, gamma, beta, r.mean, r.variance, 1e-3f); });
  time_op("batch_norm_backward", shape, reps,
          [&] { return k::batch_norm_backward(x, dy, r.mean, r.variance, gamma, 1e-3f).dx; });
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[++i]);
  if (detail::cuda_device_count() == 0) {
    std::printf("no GPU: gpu_ops_bench skipped\n");
    return 0;
  }
  const Device d = Device::cuda(0);
  for (int64_t batch : {64, 1024}) {
    const std::string tag = "cnn" + std::to_string(batch);
    conv_ops(tag.c_str(), {batch, 28, 28, 1}, {3, 3, 1, 32}, {.fused_relu = true}, reps, d);
    const Tensor a = random_on({batch, 26, 26, 32}, d, 5);
    const k::Pool2DParams pp;
    const k::MaxPoolResult pooled = k::max_pool2d(a, pp);
    const Tensor dp = random_on(pooled.y.shape(), d, 6);
    time_op("max_pool2d", tag, reps, [&] { return k::max_pool2d(a, pp).y; });
    time_op("max_pool2d_backward", tag, reps,
            [&] { return k::max_pool2d_backward(dp, pooled.workspace, a.shape(), pp); });
    const Tensor h = random_on({batch, 5408}, d, 7);
    const Tensor w = random_on({5408, 64}, d, 8);
    const Tensor bias = random_on({64}, d, 9);
    const Tensor y = k::dense(h, w, bias, true);
    const Tensor dy = random_on(y.shape(), d, 10);
    time_op("dense", tag, reps, [&] { return k::dense(h, w, bias, true); });
    time_op("dense_backward", tag, reps, [&] { return k::dense_backward(h, w, y, dy, true, false, true, true).dw; });
  }
  conv_ops("resnet256", {256, 32, 32, 16}, {3, 3, 16, 16}, {.padding = k::Padding::kSame}, reps, d);
  conv_ops("resnet256-s2", {256, 32, 32, 16}, {3, 3, 16, 32},
           {.stride_h = 2, .stride_w = 2, .padding = k::Padding::kSame}, reps, d);
  // ResNet-20's per-layer ops besides the convolutions: batch norm (stage 1 and stage 3 shapes), the residual add,
  // the relu, and the convolution's bias gradient alone (with and without bias; a plain sum over the first three axes
  // is the general reduction's path for the same sums).
  bn_ops("resnet256 [256,32,32,16]", {256, 32, 32, 16}, reps, d, 11);
  bn_ops("resnet256-s3 [256,8,8,64]", {256, 8, 8, 64}, reps, d, 21);
  const Tensor ra = random_on({256, 32, 32, 16}, d, 31);
  const Tensor rb = random_on({256, 32, 32, 16}, d, 32);
  time_op("add", "resnet256 [256,32,32,16]", reps, [&] { return k::add(ra, rb); });
  time_op("unary_relu", "resnet256 [256,32,32,16]", reps, [&] { return k::unary(k::UnaryOp::kRelu, ra); });
  const k::Conv2DParams p1{.padding = k::Padding::kSame};
  time_op("conv2d_backward_weights+bias", "resnet256 x[256,32,32,16] w[3,3,16,16]", reps, [&] {
    return k::conv2d_backward_weights(ra, rb, {3, 3, 16, 16}, true, p1).db;
  });
  time_op("conv2d_backward_weights-nobias", "resnet256 x[256,32,32,16] w[3,3,16,16]", reps, [&] {
    return k::conv2d_backward_weights(ra, rb, {3, 3, 16, 16}, false, p1).dw;
  });
  time_op("sum_axes012", "resnet256 [256*32*32,16]", reps, [&] { return k::sum(rb, {0, 1, 2}); });
  return 0;
}
