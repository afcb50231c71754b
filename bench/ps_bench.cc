// ps_bench: a parameter server's push + pull throughput beside a bare gRPC echo of the same bytes, in one process
// on 127.0.0.1 (issue 18's target: push + pull at least 80% of the echo).
//   ps_bench [--max-mb 64] [--rounds 3]
// For each size a shard of that many float32 bytes (SGD, the cheapest update) is pushed and pulled back (2x the
// bytes on the wire), and the same bytes are echoed by a server that does nothing else; each side runs
// clamp(256 MB / size, 3, 50) times per round, alternating, and the best round counts. GB/s counts both directions.
// Thread-safety: a program.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

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

}  // namespace

int main(int argc, char** argv) {
  int64_t max_mb = 64;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--max-mb") max_mb = std::atoll(argv[i + 1]);
    else if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: ps_bench [--max-mb 64] [--rounds 3]\n");
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
  auto echo = strata::bench::Echo::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(echo_port), grpc::InsecureChannelCredentials(), args));

  // A push and a pull are two calls where the echo is one. `two_calls` is the bare gRPC form of a push + pull: one
  // call with the bytes going and an empty reply, then one with an empty request and the bytes coming back; `bound`
  // (echo over two_calls) is then the best ratio a push + pull can reach on this machine, and `of_bound` the ps's
  // time against that form (two_calls over ps).
  auto call_seconds = [&](const strata::bench::Blob& blob, int iters) {
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      grpc::ClientContext context;
      strata::bench::Blob back;
      if (!echo->Echo(&context, blob, &back).ok()) {
        std::fprintf(stderr, "ps_bench: the echo failed\n");
        std::exit(1);
      }
    }
    return seconds_since(start) / iters;
  };
  std::printf("# ps push+pull vs a bare gRPC echo of the same bytes, one process, 127.0.0.1; best of %d rounds\n",
              rounds);
  std::printf("%8s  %9s  %9s  %9s  %9s  %9s  %6s  %6s  %8s\n", "size", "ps_ms", "echo_ms", "2calls_ms", "ps_GB/s",
              "echo_GB/s", "ratio", "bound", "of_bound");
  for (int64_t mb = 1; mb <= max_mb; mb *= 4) {
    const int64_t numel = (mb << 20) / 4;
    const strata::Tensor value = strata::Tensor::zeros({numel});
    const strata::Tensor grad = strata::Tensor::full({numel}, 1e-6);
    const std::string name = "w" + std::to_string(mb);
    client.create(name, value, {.name = "sgd", .learning_rate = 0.01});
    strata::bench::Blob blob, going, coming;
    blob.set_data(std::string(static_cast<size_t>(mb << 20), '\1'));
    going = blob;
    going.set_sized_reply(true);  // reply_size 0: an empty reply
    coming.set_sized_reply(true);
    coming.set_reply_size(mb << 20);
    const int iters = static_cast<int>(std::clamp<int64_t>(256 / mb, 3, 50));
    double best_ps = 1e30, best_echo = 1e30, best_two = 1e30;
    for (int r = 0; r < rounds; ++r) {
      auto start = Clock::now();
      for (int i = 0; i < iters; ++i) {
        client.push(name, grad);
        client.pull(name);
      }
      best_ps = std::min(best_ps, seconds_since(start) / iters);
      best_echo = std::min(best_echo, call_seconds(blob, iters));
      start = Clock::now();
      for (int i = 0; i < iters; ++i) {
        call_seconds(going, 1);
        call_seconds(coming, 1);
      }
      best_two = std::min(best_two, seconds_since(start) / iters);
    }
    const double bytes = 2.0 * static_cast<double>(mb << 20);
    std::printf("%6lld MB  %9.2f  %9.2f  %9.2f  %9.2f  %9.2f  %6.2f  %6.2f  %8.2f\n", static_cast<long long>(mb),
                best_ps * 1e3, best_echo * 1e3, best_two * 1e3, bytes / best_ps / 1e9, bytes / best_echo / 1e9,
                best_echo / best_ps, best_echo / best_two, best_two / best_ps);
  }
  echo_server->Shutdown();
  return 0;
}
