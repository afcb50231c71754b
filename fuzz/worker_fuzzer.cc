// Fuzzes both ends of the parameter-server worker service (src/ps/proto/worker.proto) with untrusted messages:
// - the worker's handlers (src/ps/worker_server.cc): RunFunction and Ping requests, as a hostile coordinator could
//   send them, to a WorkerServer with three functions: `echo` returns its arguments, `fail` throws the strata error
//   its first argument byte picks, `step` parses its arguments as a step output (as a chief parses a result);
// - the coordinator's end (src/ps/worker_client.cc, src/cluster/rpc_status.cc): WorkerClient::run and ping against a
//   fake worker that answers with the status code, status details (a strata error's class, "strata-error:<class>"),
//   message and result bytes the input gives, as a hostile worker could; a result is then read as the chief reads it
//   (StepOutput::parse, sum_metric_states, and the metrics' set_state), a function error rethrown as the class the
//   worker named.
// Each input is a sequence of calls: a method byte, then its bytes (a 2-byte length first). Both servers are started
// once per process on 127.0.0.1 and keep no state between inputs but counters. A strata::Error is the documented
// answer to bad bytes; anything else escaping is a finding.
// Thread-safety: one input at a time; the fake worker's scripted reply is guarded by its mutex.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <mutex>

#include "fuzz_util.h"
#include "ps/proto/step_output.pb.h"
#include "ps/proto/worker.grpc.pb.h"
#include "ps/worker_client.h"
#include "service_calls.h"
#include "strata/error.h"
#include "strata/optim/metrics.h"
#include "strata/ps/worker_server.h"
#include "strata/ps/remote_trainer.h"

using namespace strata;
namespace pb = strata::ps::proto;

namespace {

constexpr int kMaxCalls = 8;
constexpr auto kCallDeadline = std::chrono::milliseconds(200);

// What the fake worker answers next.
struct Reply {
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string message, details, result;
  bool running = false;
};

// A worker service that answers every call with the scripted reply.
class FakeWorker final : public pb::Worker::Service {
 public:
  void script(Reply reply) {
    std::lock_guard lock(mu_);
    reply_ = std::move(reply);
  }
  grpc::Status RunFunction(grpc::ServerContext*, const pb::RunFunctionRequest*,
                           pb::RunFunctionResponse* resp) override {
    const Reply r = reply();
    if (r.code == grpc::StatusCode::OK) resp->set_result(r.result);
    return {r.code, r.message, r.details};
  }
  grpc::Status Ping(grpc::ServerContext*, const pb::PingRequest*, pb::PingResponse* resp) override {
    const Reply r = reply();
    resp->set_running(r.running);
    resp->set_functions_run(static_cast<int64_t>(r.result.size()));
    return {r.code, r.message};
  }

 private:
  Reply reply() {
    std::lock_guard lock(mu_);
    return reply_;
  }
  std::mutex mu_;
  Reply reply_;  // GUARDED_BY(mu_)
};

[[noreturn]] void throw_picked(const std::string& args) {
  const std::string what = "fuzzed failure";
  switch (args.empty() ? 0 : static_cast<unsigned char>(args[0]) % 8) {
    case 0:
      throw InvalidArgument(what);
    case 1:
      throw ShapeError(what);
    case 2:
      throw IoError(what);
    case 3:
      throw DataCorrupt(what);
    case 4:
      throw Timeout(what);
    case 5:
      throw Unavailable(what);
    case 6:
      throw std::runtime_error(what);
    default:
      throw 42;  // not even a std::exception
  }
}

struct Servers {
  ps::WorkerServer worker;
  FakeWorker fake;
  std::unique_ptr<grpc::Server> fake_server;
  std::unique_ptr<pb::Worker::Stub> worker_stub;
  std::unique_ptr<ps::detail::WorkerClient> client;  // the coordinator's end, pointed at the fake worker
};

Servers& servers() {
  static Servers* s = [] {
    auto* s = new Servers;  // never destroyed: gRPC's threads outlive static destructors otherwise
    s->worker.register_function("echo", [](int64_t, const std::string& args) { return args; });
    s->worker.register_function("fail", [](int64_t, const std::string& args) -> std::string { throw_picked(args); });
    s->worker.register_function(
        "step", [](int64_t, const std::string& args) { return ps::StepOutput::parse(args).serialize(); });
    s->worker.start("127.0.0.1:0");
    s->worker_stub = pb::Worker::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(s->worker.port()), grpc::InsecureChannelCredentials()));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&s->fake);
    s->fake_server = builder.BuildAndStart();
    if (!s->fake_server) std::abort();  // the fuzzer's own machinery failed: not a finding in strata
    s->client = std::make_unique<ps::detail::WorkerClient>("127.0.0.1:" + std::to_string(port),
                                                           std::chrono::seconds(10), std::chrono::milliseconds(100));
    return s;
  }();
  return *s;
}

// The chief's reading of a result: parsed, summed with the results before it, and set into metrics.
void read_result(const std::string& result, std::vector<ps::StepOutput>& outputs) {
  try {
    outputs.push_back(ps::StepOutput::parse(result));
    const std::vector<std::vector<double>> sum = ps::sum_metric_states(outputs);
    metrics::Mean mean("loss");
    metrics::Precision precision;
    if (!sum.empty()) mean.set_state(sum[0]);
    if (sum.size() > 1) precision.set_state(sum[1]);
    (void)mean.result();
    (void)precision.result();
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_protobuf_logs();
  servers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Bytes in(data, size);
  Servers& s = servers();
  std::vector<ps::StepOutput> outputs;
  for (int i = 0; i < kMaxCalls && !in.empty(); ++i) {
    const int method = in.byte() % 4;
    switch (method) {
      case 0:  // a coordinator's RunFunction to the worker
        fuzz::call_parsed(*s.worker_stub, &pb::Worker::Stub::RunFunction, in.string(), kCallDeadline);
        break;
      case 1:  // a coordinator's Ping to the worker
        fuzz::call_parsed(*s.worker_stub, &pb::Worker::Stub::Ping, in.string(), kCallDeadline);
        break;
      case 2: {  // a worker's answer to RunFunction, read by the coordinator
        Reply reply;
        reply.code = static_cast<grpc::StatusCode>(in.byte() % 17);
        reply.details = in.string();  // binary metadata (grpc-status-details-bin): any bytes travel
        reply.message = in.string();
        reply.result = in.string();
        s.fake.script(reply);
        ps::detail::WorkerClient::Outcome out = s.client->run("train_step", i, "", kCallDeadline);
        if (out.kind == ps::detail::WorkerClient::Outcome::kOk) read_result(out.result, outputs);
        if (out.kind == ps::detail::WorkerClient::Outcome::kFunctionError) {
          try {
            std::rethrow_exception(out.error);
          } catch (const Error&) {
          }
        }
        break;
      }
      case 3: {  // a worker's answer to Ping
        Reply reply;
        reply.code = static_cast<grpc::StatusCode>(in.byte() % 17);
        reply.running = in.byte() & 1;
        reply.message = in.string();
        s.fake.script(reply);
        std::string why;
        (void)s.client->ping(kCallDeadline, &why);
        break;
      }
    }
  }
  return 0;
}
