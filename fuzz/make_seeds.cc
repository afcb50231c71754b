// Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) with strata's own writers, plus a few damaged copies
// of each: `make_seeds DIR`. The seeds are committed; run it again when a format changes. Each seed is named for what
// it holds. The inputs follow each target's layout (a mode byte first where the target reads one).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "cluster/proto/coordination.pb.h"
#include "fuzz_util.h"
#include "ps/proto/parameter_server.pb.h"
#include "ps/proto/worker.pb.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/data/example.h"
#include "strata/data/idx.h"
#include "strata/data/tfrecord.h"
#include "strata/io/checkpoint.h"
#include "strata/io/npy.h"
#include "strata/io/safetensors.h"
#include "strata/ps/remote_trainer.h"
#include "strata/nn/nn.h"
#include "strata/train/saved_model.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

fs::path out_dir;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(out_dir / target);
  std::ofstream(out_dir / target / name, std::ios::binary) << bytes;
}

// `bytes` with byte `at` (counted from the end when negative) flipped.
std::string flip(std::string bytes, long at) {
  if (bytes.empty()) return bytes;
  const size_t i =
      at >= 0 ? static_cast<size_t>(at) % bytes.size() : bytes.size() - static_cast<size_t>(-at) % bytes.size();
  bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  return bytes;
}

std::string cut(const std::string& bytes, size_t keep) { return bytes.substr(0, std::min(keep, bytes.size())); }

data::Example example(int i) {
  data::Example ex;
  ex.set_bytes("image", std::string("\x01\x02\x03\x04", 4))
      .set_int64s("label", {i})
      .set_floats("weights", {0.5f, 1.5f, -2.0f})
      .set_floats("floats", {1.0f, 2.0f})
      .set_int64s("ids", {3, -1, 1 << 20})
      .set("names", data::Feature::of_bytes({"a", "bc"}));
  return ex;
}

void tfrecord_seeds(const fs::path& tmp) {
  const char* suffix[] = {"plain", "gzip", "zlib"};
  for (int c = 0; c < 3; ++c) {
    const fs::path p = tmp / (std::string("records.") + suffix[c]);
    data::TFRecordWriter w(p.string(), static_cast<data::Compression>(c));
    for (int i = 0; i < 4; ++i) w.write(example(i).serialize());
    w.write("");
    w.close();
    const std::string file = read_file(p);
    const std::string mode(1, static_cast<char>(c));
    seed("tfrecord", std::string(suffix[c]) + "-valid", mode + file);
    seed("tfrecord", std::string(suffix[c]) + "-valid-small-buffer-skip",
         std::string(1, static_cast<char>(c | 12)) + file);
    seed("tfrecord", std::string(suffix[c]) + "-flipped-middle", mode + flip(file, static_cast<long>(file.size() / 2)));
    seed("tfrecord", std::string(suffix[c]) + "-truncated", mode + cut(file, file.size() - 7));
  }
  // A gzip file of two members (two files concatenated, as `cat a.gz b.gz` makes one; it reads as one stream).
  std::string members;
  for (int part = 0; part < 2; ++part) {
    const fs::path p = tmp / ("member" + std::to_string(part) + ".gz");
    data::TFRecordWriter w(p.string(), {.compression = data::Compression::kGzip});
    for (int i = 0; i < 20; ++i) w.write(std::string(200, static_cast<char>('a' + (i + 20 * part) % 26)));
    w.close();
    members += read_file(p);
  }
  seed("tfrecord", "gzip-members-valid", std::string(1, '\x01') + members);
  seed("tfrecord", "gzip-members-flipped-trailer", std::string(1, '\x05') + flip(members, -6));
}

void example_seeds() {
  seed("example", "valid", example(7).serialize());
  data::Example fixed;
  fixed.set_bytes("image", std::string("\x01\x02\x03\x04", 4))
      .set_int64s("label", {3})
      .set_floats("weights", {1, 2, 3});
  seed("example", "fixed-valid", fixed.serialize());
  seed("example", "fixed-flipped", flip(fixed.serialize(), 9));
  seed("example", "truncated", cut(example(1).serialize(), 30));
}

void idx_seeds(const fs::path& tmp) {
  Tensor images = Tensor::zeros({3, 4, 4}, DType::kUInt8);
  Tensor labels = Tensor::full({3}, 2, DType::kInt32);
  Tensor floats = Tensor::full({2, 3}, 0.25);
  data::write_idx((tmp / "a.idx").string(), images);
  data::write_idx((tmp / "b.idx").string(), labels);
  data::write_idx((tmp / "c.idx.gz").string(), floats, /*gzip=*/true);
  seed("idx", "uint8-valid", read_file(tmp / "a.idx"));
  seed("idx", "int32-valid", read_file(tmp / "b.idx"));
  seed("idx", "float32-gzip-valid", read_file(tmp / "c.idx.gz"));
  seed("idx", "uint8-truncated", cut(read_file(tmp / "a.idx"), 20));
  seed("idx", "int32-bad-dim", flip(read_file(tmp / "b.idx"), 4));
}

void npy_seeds(const fs::path& tmp) {
  io::write_npy((tmp / "a.npy").string(), Tensor::full({2, 3}, 0.5));
  io::write_npy((tmp / "b.npy").string(), Tensor::zeros({4}, DType::kUInt8));
  seed("npy", "float32-valid", read_file(tmp / "a.npy"));
  seed("npy", "uint8-valid", read_file(tmp / "b.npy"));
  seed("npy", "float32-truncated", cut(read_file(tmp / "a.npy"), 20));
  seed("npy", "bad-shape", flip(read_file(tmp / "a.npy"), 60));
}

void saved_model_seeds(const fs::path& tmp) {
  Sequential model({nn::Rescaling(0.5f), nn::Conv2D(2, 3), nn::MaxPooling2D(2), nn::Flatten(), nn::Dense(3)});
  model.build_for({1, 6, 6, 1}, DType::kUInt8);
  save_model(model, (tmp / "m.safetensors").string(), {.input_dtype = DType::kUInt8});
  Sequential recurrent({nn::Embedding(5, 2), nn::GRU(2), nn::Dense(1)});
  recurrent.build_for({1, 3}, DType::kInt64);
  save_model(recurrent, (tmp / "r.safetensors").string(), {.input_dtype = DType::kInt64});
  seed("saved_model", "cnn-valid", read_file(tmp / "m.safetensors"));
  seed("saved_model", "gru-valid", read_file(tmp / "r.safetensors"));
  seed("saved_model", "cnn-flipped-config", flip(read_file(tmp / "m.safetensors"), 200));
}

void csv_seeds() {
  seed("csv", "valid", std::string(1, '\x00') + "1.5,2,3,x\n-2,,4,\"quoted, text\"\n3e2,7,9,\n");
  seed("csv", "header-semicolon-na", std::string(1, '\x15') + "a;b;c;d\n1;NA;3;NA\n2.5;-4;5;\"q\"\"x\"\n");
  seed("csv", "select-cols", std::string(1, '\x08') + "1,x,2,3,y,z\n4,x,5,6,y,w\n");
  seed("csv", "unterminated-quote", std::string(1, '\x00') + "1,2,3,\"open\n");
  seed("csv", "bad-number", std::string(1, '\x00') + "x,2,3,4\n1,99999999999,3,4\n");
}

void safetensors_seeds(const fs::path& tmp) {
  const fs::path p = tmp / "w.safetensors";
  io::save_safetensors(p.string(),
                       {{"dense/kernel", Tensor::ones({2, 3})},
                        {"ids", Tensor::full({4}, 3, DType::kInt64)},
                        {"bytes", Tensor::zeros({5}, DType::kUInt8)}},
                       {{"format", "pt"}});
  const std::string file = read_file(p);
  seed("safetensors", "valid", file);
  seed("safetensors", "flipped-data", flip(file, -3));
  seed("safetensors", "flipped-header", flip(file, 30));
  seed("safetensors", "truncated", cut(file, file.size() - 10));
}

void checkpoint_seeds(const fs::path& tmp) {
  io::CheckpointManager manager((tmp / "ckpt").string(), 0);
  io::TrainingCheckpoint c;
  c.weights = {{"dense/kernel", Tensor::ones({2, 3})}, {"dense/bias", Tensor::zeros({3})}};
  c.optimizer = {{"iterations", Tensor::zeros({}, DType::kInt64)}};
  c.input = {{"iterator", Tensor::zeros({4}, DType::kUInt8)}};
  c.step = 7;
  c.epoch = 1;
  c.extra_json = R"({"note": "fuzz"})";
  manager.save(c, 1);
  manager.save(c, 2);
  const std::string manifest = read_file(tmp / "ckpt" / "ckpt-2" / "manifest.json");
  const std::string pointer = read_file(tmp / "ckpt" / "checkpoint");
  seed("checkpoint", "manifest-valid", std::string(1, '\x00') + manifest);
  seed("checkpoint", "manifest-truncated", std::string(1, '\x00') + cut(manifest, manifest.size() / 2));
  seed("checkpoint", "pointer-valid", std::string(1, '\x01') + pointer);
  seed("checkpoint", "pointer-other-latest",
       std::string(1, '\x01') + R"({"latest": "ckpt-9", "all": ["ckpt-1", "../x"]})");
}

void tf_config_seeds() {
  cluster::ClusterSpec spec;
  spec.jobs = {{"chief", {"host0:2222"}}, {"worker", {"host1:2222", "host2:2222"}}, {"ps", {"host3:2222"}}};
  seed("tf_config", "worker-valid", cluster::make_tf_config(spec, "worker", 1));
  seed("tf_config", "chief-valid", cluster::make_tf_config(spec, "chief", 0));
  seed("tf_config", "evaluator",
       R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}, "rpc_layer": "grpc"})");
  seed("tf_config", "bad-index", R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 5}})");
  seed("tf_config", "bad-address", R"({"cluster": {"worker": ["[::1"]}, "task": {"type": "worker", "index": 0}})");
}

void job_seeds(const fs::path& root) {
  for (const auto& entry : fs::directory_iterator(root / "configs")) {
    if (entry.path().extension() == ".yaml") seed("job", entry.path().filename().string(), read_file(entry.path()));
  }
  seed("job", "bad-learning-rate",
       "model: [flatten, {dense: {units: 10}}]\noptimizer: {name: adam, learning_rate: -1}\n");
  seed("job", "nested-flow", "model: [[[[[{dense: {units: [1, {a: 2}]}}]]]]]\n");
}

void coordination_seeds() {
  namespace pb = strata::cluster;
  pb::SetRequest set;
  set.set_key("worker:0/addr");
  set.set_value("10.0.0.1:4711");
  pb::GetRequest get;
  get.set_key("worker:0/addr");
  pb::AddRequest add;
  add.set_key("count");
  add.set_delta(3);
  pb::WaitRequest wait;
  wait.add_keys("worker:0/addr");
  wait.add_keys("missing");
  wait.set_wait_ms(5);
  pb::BarrierRequest barrier;
  barrier.set_barrier_id("init");
  barrier.set_task("worker:0");
  barrier.set_num_tasks(1);
  barrier.set_timeout_ms(5);
  pb::BarrierRequest named = barrier;
  named.add_tasks("worker:0");
  named.add_tasks("worker:1");
  named.set_num_tasks(0);
  pb::HeartbeatRequest beat;
  beat.set_task("worker:1");
  beat.set_incarnation(42);
  pb::NumKeysRequest keys;
  keys.set_prefix("worker");
  const std::string header("\x20\x01", 2);  // heartbeat timeout byte, then the configured-tasks flag
  seed("coordination", "set-get-add",
       header + fuzz::encode_call(0, set.SerializeAsString()) + fuzz::encode_call(1, get.SerializeAsString()) +
           fuzz::encode_call(2, add.SerializeAsString()) + fuzz::encode_call(2, add.SerializeAsString()) +
           fuzz::encode_call(7, keys.SerializeAsString()));
  seed("coordination", "wait-barrier",
       header + fuzz::encode_call(0, set.SerializeAsString()) + fuzz::encode_call(5, wait.SerializeAsString()) +
           fuzz::encode_call(8, barrier.SerializeAsString()) + fuzz::encode_call(8, named.SerializeAsString()));
  seed("coordination", "heartbeat-lost",
       header + fuzz::encode_call(9, beat.SerializeAsString()) + fuzz::encode_call(8, named.SerializeAsString()) +
           fuzz::encode_call(10, "") + fuzz::encode_call(11, beat.SerializeAsString()));
}

void ps_seeds() {
  namespace pb = strata::ps::proto;
  pb::CreateRequest create;
  create.set_name("dense/kernel:0");
  create.mutable_initial()->add_shape(2);
  create.mutable_initial()->add_shape(2);
  const float values[4] = {1, 2, 3, 4};
  create.mutable_initial()->set_data(std::string(reinterpret_cast<const char*>(values), sizeof values));
  create.mutable_optimizer()->set_name("adam");
  create.mutable_optimizer()->set_learning_rate(0.01);
  pb::PushRequest push;
  push.set_name("dense/kernel:0");
  *push.mutable_gradient() = create.initial();
  push.set_step_id("worker:0/step:1");
  pb::PushRequest rows = push;
  rows.mutable_gradient()->clear_shape();
  rows.mutable_gradient()->add_shape(1);
  rows.mutable_gradient()->add_shape(2);
  rows.mutable_gradient()->set_data(std::string(reinterpret_cast<const char*>(values), 8));
  rows.add_rows(1);
  rows.set_step_id("worker:0/step:2");
  pb::PushRequest round = push;
  round.set_step_id("worker:1/step:3");
  round.set_round(3);
  round.set_round_size(2);
  pb::PullRequest pull;
  pull.set_name("dense/kernel:0");
  pb::PullRequest pull_rows = pull;
  pull_rows.add_rows(0);
  const std::string header(1, '\x02');  // the step window
  seed("ps", "create-push-pull",
       header + fuzz::encode_call(0, create.SerializeAsString()) + fuzz::encode_call(2, push.SerializeAsString()) +
           fuzz::encode_call(2, push.SerializeAsString()) + fuzz::encode_call(1, pull.SerializeAsString()) +
           fuzz::encode_call(3, ""));
  seed("ps", "sparse-and-round",
       header + fuzz::encode_call(0, create.SerializeAsString()) + fuzz::encode_call(2, rows.SerializeAsString()) +
           fuzz::encode_call(1, pull_rows.SerializeAsString()) + fuzz::encode_call(2, round.SerializeAsString()));
  pb::SaveRequest save;
  save.set_checkpoint(1);
  pb::RestoreRequest restore;
  restore.set_checkpoint(1);
  seed("ps", "save-restore",
       header + fuzz::encode_call(0, create.SerializeAsString()) + fuzz::encode_call(2, push.SerializeAsString()) +
           fuzz::encode_call(4, save.SerializeAsString()) + fuzz::encode_call(5, restore.SerializeAsString()) +
           fuzz::encode_call(1, pull.SerializeAsString()));
  pb::PromoteRequest promote;
  promote.set_name("dense/kernel:0");
  pb::ReplicateCreateRequest replicate;
  *replicate.mutable_shard() = create;
  replicate.set_primary(1);
  seed("ps", "replication",
       header + fuzz::encode_call(0, create.SerializeAsString()) + fuzz::encode_call(6, promote.SerializeAsString()) +
           fuzz::encode_call(7, replicate.SerializeAsString()) + fuzz::encode_call(8, push.SerializeAsString()) +
           fuzz::encode_call(1, pull.SerializeAsString()));
}

void worker_seeds() {
  namespace pb = strata::ps::proto;
  strata::ps::StepOutput step;
  step.loss = 0.25;
  step.metric_states = {{1.5, 6}, {3, 1}};
  const std::string result = step.serialize();
  pb::RunFunctionRequest echo;
  echo.set_function("echo");
  echo.set_step_id(7);
  echo.set_args("abc");
  pb::RunFunctionRequest fail = echo;
  fail.set_function("fail");
  fail.set_args(std::string(1, '\x03'));
  pb::RunFunctionRequest parse = echo;
  parse.set_function("step");
  parse.set_args(result);
  parse.set_round(2);
  parse.set_round_size(3);
  pb::RunFunctionRequest unknown = echo;
  unknown.set_function("no_such_function");
  // A fake worker's reply (method 2): the status code byte, then the status details (a strata error's class, as
  // src/cluster/rpc_status.cc writes it), the message, the result.
  const auto reply = [](int code, const std::string& type, const std::string& message, const std::string& bytes) {
    std::string body(1, static_cast<char>(code));
    const std::string details = type.empty() ? "" : "strata-error:" + type;
    for (const std::string* s : {&details, &message, &bytes}) body += fuzz::encode_call(0, *s).substr(1);
    return std::string(1, '\x02') + body;
  };
  seed("worker", "run-ping",
       fuzz::encode_call(0, echo.SerializeAsString()) + fuzz::encode_call(0, fail.SerializeAsString()) +
           fuzz::encode_call(0, parse.SerializeAsString()) + fuzz::encode_call(0, unknown.SerializeAsString()) +
           fuzz::encode_call(1, ""));
  seed("worker", "replies",
       reply(0, "", "", result) + reply(0, "", "", result) + reply(3, "DataCorrupt", "bad shard", "") +
           reply(14, "", "connection reset", "") + reply(5, "ShapeError", "a wrong shape", "") +
           std::string("\x03\x00\x01") + fuzz::encode_call(0, "").substr(1));
  seed("worker", "reply-damaged", reply(0, "", "", flip(result, 3)) + reply(0, "", "", cut(result, 5)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_seeds OUT_DIR STRATA_SOURCE_DIR\n";
    return 2;
  }
  out_dir = argv[1];
  const fs::path tmp = fs::temp_directory_path() / ("strata-make-seeds-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  tfrecord_seeds(tmp);
  example_seeds();
  idx_seeds(tmp);
  npy_seeds(tmp);
  saved_model_seeds(tmp);
  csv_seeds();
  safetensors_seeds(tmp);
  checkpoint_seeds(tmp);
  tf_config_seeds();
  job_seeds(argv[2]);
  coordination_seeds();
  ps_seeds();
  worker_seeds();
  fs::remove_all(tmp);
  return 0;
}
