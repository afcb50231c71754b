// Times strata's CPU kernels on the shapes of a small Keras-style CNN/MLP training step, next to
// the raw library calls they wrap, and prints one "name<TAB>median_ms" line per measurement.
// bench/kernels_bench.py runs it beside the same shapes in PyTorch and prints the ratios.
//
//   kernels_bench --threads 2 [--reps 30] [--warmup 5]
//
// Measured: matmul 256x784x128 forward, its two backward products (dA = dY B^T, dB = A^T dY) and
// 1024^3 through kernels::matmul, through the raw dnnl_sgemm it calls (into a preallocated output),
// and through OpenBLAS's cblas_sgemm for reference; conv2d N=64 28x28x1 -> 26x26x32 3x3 VALID with
// bias: forward, backward-input, backward-weights and their sums; max_pool2d 2x2 on [64, 26, 26, 32].
// Thread-safety: a single-threaded driver (the kernels use --threads threads).
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "strata/random.h"
#include "strata/threading.h"

namespace {

using namespace strata;

int g_reps = 30;
int g_warmup = 5;

// Median time of each function, timed round-robin (one call of each per round) so that the noise
// of a shared machine falls on all of them alike and their ratios stay meaningful.
std::vector<double> median_ms(const std::vector<std::function<void()>>& fns, int reps) {
  for (int i = 0; i < g_warmup; ++i) {
    for (const auto& fn : fns) fn();
  }
  std::vector<std::vector<double>> t(fns.size());
  for (int i = 0; i < reps; ++i) {
    for (size_t k = 0; k < fns.size(); ++k) {
      const auto start = std::chrono::steady_clock::now();
      fns[k]();
      t[k].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
  }
  std::vector<double> medians;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    medians.push_back(v[v.size() / 2]);
  }
  return medians;
}

void report(const std::string& name, double ms) {
  std::printf("%s\t%.4f\n", name.c_str(), ms);
  std::fflush(stdout);
}

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  gen.fill_uniform(t.data<float>(), t.numel(), -1.0f, 1.0f);
  return t;
}

// C[M, N] = op(A) op(B), row-major, like kernels::matmul.
void bench_matmul(const std::string& name, int64_t M, int64_t N, int64_t K, bool ta, bool tb) {
  const Tensor a = random_tensor(ta ? Shape{K, M} : Shape{M, K}, 1);
  const Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, 2);
  std::vector<float> c(M * N);
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  const int reps = M * N * K >= (int64_t{1} << 28) ? std::max(5, g_reps / 3) : g_reps;
  // strata and the raw call it makes share one OpenMP pool: timed round-robin. OpenBLAS has a
  // pool of its own whose spinning threads would slow the others down at 2 threads: timed apart.
  const std::vector<double> ms = median_ms({[&] { kernels::matmul(a, b, ta, tb); },
                                            [&] {
                                              dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, a.data<float>(),
                                                         lda, b.data<float>(), ldb, 0.0f, c.data(), N);
                                            }},
                                           reps);
  const double openblas_ms =
      median_ms({[&] {
                  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
                              1.0f, a.data<float>(), lda, b.data<float>(), ldb, 0.0f, c.data(), N);
                }},
                reps)[0];
  report("matmul/" + name + "/strata", ms[0]);
  report("matmul/" + name + "/dnnl_sgemm", ms[1]);
  report("matmul/" + name + "/openblas", openblas_ms);
}

void bench_conv() {
  const Tensor x = random_tensor({64, 28, 28, 1}, 3);
  const Tensor w = random_tensor({3, 3, 1, 32}, 4);
  const Tensor b = random_tensor({32}, 5);
  const Tensor dy = random_tensor({64, 26, 26, 32}, 6);
  const kernels::Conv2DParams p;  // stride 1, VALID
  // Each op in a loop of its own, as the PyTorch side is timed.
  auto time = [&](const char* name, const std::function<void()>& fn) {
    report(std::string("conv/") + name + "/strata", median_ms({fn}, g_reps)[0]);
  };
  time("forward", [&] { kernels::conv2d(x, w, b, p); });
  time("backward_input", [&] { kernels::conv2d_backward_input(dy, w, x.shape(), p); });
  time("backward_weights", [&] { kernels::conv2d_backward_weights(x, dy, w.shape(), true, p); });
  time("fwd+bwd_all", [&] {
    kernels::conv2d(x, w, b, p);
    kernels::conv2d_backward_input(dy, w, x.shape(), p);
    kernels::conv2d_backward_weights(x, dy, w.shape(), true, p);
  });
  time("fwd+bwd_weights", [&] {
    kernels::conv2d(x, w, b, p);
    kernels::conv2d_backward_weights(x, dy, w.shape(), true, p);
  });
}

void bench_max_pool() {
  const Tensor x = random_tensor({64, 26, 26, 32}, 7);
  const kernels::Pool2DParams p;  // 2x2, stride 2, VALID
  const kernels::MaxPoolResult r = kernels::max_pool2d(x, p);
  report("max_pool/forward/strata", median_ms({[&] { kernels::max_pool2d(x, p); }}, g_reps)[0]);
  report("max_pool/backward/strata",
         median_ms({[&] { kernels::max_pool2d_backward(r.y, r.workspace, x.shape(), p); }}, g_reps)[0]);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--threads" && has_value) {
      threads = std::atoi(argv[++i]);
    } else if (arg == "--reps" && has_value) {
      g_reps = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--warmup" && has_value) {
      g_warmup = std::max(0, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--reps R] [--warmup W]\n", argv[0]);
      return 2;
    }
  }
  strata::set_num_threads(threads);   // this thread's OpenMP count too, which oneDNN follows
  openblas_set_num_threads(threads);  // OpenBLAS keeps its own pool
  std::printf("threads\t%d\n", strata::num_threads());

  bench_matmul("256x784x128/fwd", 256, 128, 784, false, false);      // Y = A B
  bench_matmul("256x784x128/dA=dY.Bt", 256, 784, 128, false, true);  // dA = dY B^T
  bench_matmul("256x784x128/dB=At.dY", 784, 128, 256, true, false);  // dB = A^T dY
  bench_matmul("1024^3", 1024, 1024, 1024, false, false);
  bench_conv();
  bench_max_pool();
  return 0;
}
