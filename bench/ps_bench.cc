// ps_bench: a parameter server's push + pull throughput beside a bare gRPC echo of the same bytes, in one process
// on 127.0.0.1 (issue 18's target: push + pull at least 80% of the echo).
//   ps_bench [--max-mb 64] [--calls 400]
// For each size a shard of that many float32 bytes (SGD, the cheapest update) is pushed and pulled back (2x the
// bytes on the wire), and the same bytes are echoed by a server that does nothing else. The sides are interleaved
// call by call (a ps push + pull, an echo, the bare two-call form; repeated clamp(calls / size in MB, 8, calls)
// times), so a slow spell of a shared machine falls on all three alike, and each side's median time counts: with a
// few rounds of back-to-back calls instead, the 1 MB echo's best round swung by 30% between runs on 2 cores.
// GB/s counts both directions.
// Thread-safety: a program.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "proto/echo.grpc.pb.h"
#include "strata/ps/server.h"

namespace {

using Clock = std::chrono::steady_clock;

class EchoService final : public strata::bench::Echo::Service {
  grpc::Status Echo(grpc::ServerContext*, const strata::bench::Blob* in, strata::bench::Blob* out) override {
    if (in->sized_reply()) {
      out->mutable_data()->assign(static_cast<size_t>(in->reply_size()), '\1');
    } else {
      out->set_data(in->data());
    }
    return grpc::Status::OK;
  }
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t max_mb = 64;
  int64_t calls = 400;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    if (flag == "--max-mb" && has_value)
      max_mb = std::atoll(argv[i + 1]);
    else if (flag == "--calls" && has_value)
      calls = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: ps_bench [--max-mb 64] [--calls 400]\n");
      return 2;
    }
  }
  strata::ps::ParameterServer ps;
  ps.start("127.0.0.1:0");
  strata::ps::ParameterServerClient client("127.0.0.1:" + std::to_string(ps.port()));

  EchoService echo_service;
  grpc::ServerBuilder builder;
  int echo_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &echo_port);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(&echo_service);
  auto echo_server = builder.BuildAndStart();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto echo = strata::bench::Echo::NewStub(
      grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(echo_port), grpc::InsecureChannelCredentials(), args));

  // A push and a pull are two calls where the echo is one. `2calls` is the bare gRPC form of a push + pull: one
  // call with the bytes going and an empty reply, then one with an empty request and the bytes coming back; `bound`
  // (echo over 2calls) is then the best ratio a push + pull can reach on this machine, and `of_bound` the ps's
  // time against that form (2calls over ps).
  auto echo_call = [&](const strata::bench::Blob& blob) {
    grpc::ClientContext context;
    strata::bench::Blob back;
    if (!echo->Echo(&context, blob, &back).ok()) {
      std::fprintf(stderr, "ps_bench: the echo failed\n");
      std::exit(1);
    }
  };
  if (max_mb < 1 || calls < 1) {
    std::fprintf(stderr, "ps_bench: --max-mb and --calls must be positive\n");
    return 2;
  }
  std::printf(
      "# ps push+pull vs a bare gRPC echo of the same bytes, one process, 127.0.0.1; median of interleaved calls\n");
  std::printf("%8s  %6s  %9s  %9s  %9s  %9s  %9s  %6s  %6s  %8s\n", "size", "calls", "ps_ms", "echo_ms", "2calls_ms",
              "ps_GB/s", "echo_GB/s", "ratio", "bound", "of_bound");
  for (int64_t mb = 1; mb <= max_mb; mb *= 4) {
    const int64_t numel = (mb << 20) / 4;
    const strata::Tensor value = strata::Tensor::zeros({numel});
    const strata::Tensor grad = strata::Tensor::full({numel}, 1e-6);
    const std::string name = std::string("w").append(std::to_string(mb));
    client.create(name, value, {.name = "sgd", .learning_rate = 0.01});
    strata::bench::Blob blob, going, coming;
    blob.set_data(std::string(static_cast<size_t>(mb << 20), '\1'));
    going = blob;
    going.set_sized_reply(true);  // reply_size 0: an empty reply
    coming.set_sized_reply(true);
    coming.set_reply_size(mb << 20);
    const int64_t n = std::clamp<int64_t>(calls / mb, std::min<int64_t>(8, calls), calls);
    // One untimed call of each first: connections, the shard's first touch, gRPC's buffers.
    client.push(name, grad);
    client.pull(name);
    echo_call(blob);
    std::vector<double> ps_s, echo_s, two_s;
    for (int64_t i = 0; i < n; ++i) {
      auto start = Clock::now();
      client.push(name, grad);
      client.pull(name);
      ps_s.push_back(seconds_since(start));
      start = Clock::now();
      echo_call(blob);
      echo_s.push_back(seconds_since(start));
      start = Clock::now();
      echo_call(going);
      echo_call(coming);
      two_s.push_back(seconds_since(start));
    }
    const double ps = median(ps_s), echo_t = median(echo_s), two = median(two_s);
    const double bytes = 2.0 * static_cast<double>(mb << 20);
    std::printf("%6lld MB  %6lld  %9.3f  %9.3f  %9.3f  %9.2f  %9.2f  %6.2f  %6.2f  %8.2f\n", static_cast<long long>(mb),
                static_cast<long long>(n), ps * 1e3, echo_t * 1e3, two * 1e3, bytes / ps / 1e9, bytes / echo_t / 1e9,
                echo_t / ps, echo_t / two, two / ps);
  }
  echo_server->Shutdown();
  return 0;
}
