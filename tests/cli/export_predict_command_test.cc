// `strata export` and `strata predict` end to end: a CNN job trained under each strategy exports a saved model whose
// predictions are the one-device model's with the checkpoint's weights; predicting the test images gives exactly
// the test accuracy `strata train` and `strata evaluate` printed; -o MODEL.onnx writes the model as ONNX; bad inputs
// are clear errors with status 1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/checkpoint_loading.h"
#include "cli/job.h"
#include "cli_test_util.h"
#include "onnx/onnx.pb.h"
#include "strata/data/convert.h"
#include "strata/data/example.h"
#include "strata/data/idx.h"
#include "strata/data/tfrecord.h"
#include "strata/io/npy.h"

namespace strata::cli {
namespace {

using ::testing::HasSubstr;

// The tiny data set (write_tiny_idx) with the main job's CNN, smaller, and a learning rate that leaves one epoch
// short of perfect (0.4062 on the 64 test images), so that comparing accuracies tells predictions apart.
std::string cnn_job(const fs::path& dir) {
  write_tiny_idx(dir, "train", 512, 1);
  write_tiny_idx(dir, "t10k", 64, 2);
  return write_job(dir, "data:\n  format: idx\n  directory: " + dir.string() +
                            "\n  scale: 0.00392156862745098\n  shuffle: 512\n"
                            "model:\n  - conv2d: {filters: 4, kernel_size: 3, activation: relu}\n"
                            "  - max_pooling2d: {pool_size: 2}\n  - flatten\n  - dense: {units: 16, activation: relu}\n"
                            "  - dense: {units: 10}\n"
                            "loss: {name: sparse_categorical_crossentropy, from_logits: true}\n"
                            "optimizer: {name: adam, learning_rate: 0.001}\nmetrics: [accuracy]\n"
                            "epochs: 1\nbatch_size: 32\nseed: 1\n");
}

const std::string kStrata = STRATA_BINARY;

// "0.9375" of the last "test accuracy 0.9375" in `out` (under `strata launch`, any task's); "" when none.
std::string printed_accuracy(const std::string& out) {
  const std::regex line(R"(test accuracy ([0-9.]+))");
  std::string last;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) last = (*it)[1];
  return last;
}

// The outputs a one-device model of the job computes on the test images with the checkpoint's weights, in this
// process through the library (the job's own input scaling, no saved model involved).
Tensor one_device_outputs(const std::string& job_file, const fs::path& checkpoint) {
  Job job = load_job(job_file);
  std::shared_ptr<Sequential> model = build_model(job);
  compile_model(job, *model);
  model->build_for(input_shape(job));
  load_job_checkpoint(*model, checkpoint.string());
  Tensor images = data::read_idx(job.data.directory + "/t10k-images-idx3-ubyte");
  images = images.reshape({images.dim(0), 28, 28, 1});
  const Tensor x = data::to_float(images, static_cast<float>(job.data.scale));
  return model->predict(data::Dataset::from_tensor_slices({x}).batch(32));
}

void expect_close(const Tensor& want, const Tensor& got, float tolerance) {
  ASSERT_EQ(want.shape(), got.shape());
  const std::vector<float> w = want.to_vector<float>(), g = got.to_vector<float>();
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(g[i], w[i], tolerance) << "element " << i;
}

// The accuracy of outputs [N, classes] against the test labels, printed as the CLI prints it ("%.4f").
std::string accuracy_of(const Tensor& outputs, const fs::path& dir) {
  const Tensor labels = data::read_idx((dir / "t10k-labels-idx1-ubyte").string());
  const int64_t n = outputs.dim(0), classes = outputs.dim(1);
  EXPECT_EQ(labels.dim(0), n);
  const float* p = outputs.data<float>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (p[i * classes + c] > p[i * classes + best]) best = c;
    correct += best == labels.data<uint8_t>()[i];
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", static_cast<double>(correct) / static_cast<double>(n));
  return buf;
}

// The test images as tf.train.Examples, as `strata data convert` writes them (raw pixel bytes and a label), to `path`.
void write_examples(const fs::path& dir, const fs::path& path, data::Compression compression) {
  const Tensor images = data::read_idx((dir / "t10k-images-idx3-ubyte").string());
  const Tensor labels = data::read_idx((dir / "t10k-labels-idx1-ubyte").string());
  data::TFRecordWriter out(path.string(), compression);
  for (int64_t i = 0; i < images.dim(0); ++i) {
    const auto* pixels = reinterpret_cast<const char*>(images.data<uint8_t>() + i * 784);
    out.write(data::Example()
                  .set_bytes("image", std::string_view(pixels, 784))
                  .set_int64s("label", {labels.data<uint8_t>()[i]})
                  .serialize());
  }
  out.close();
}

// The test images as Kaggle's fashion-mnist_test.csv holds them: a header "label,pixel1,...,pixel784", then a row
// per image, the label first.
void write_kaggle_csv(const fs::path& dir, const fs::path& path) {
  const Tensor images = data::read_idx((dir / "t10k-images-idx3-ubyte").string());
  const Tensor labels = data::read_idx((dir / "t10k-labels-idx1-ubyte").string());
  std::ofstream out(path);
  out << "label";
  for (int p = 1; p <= 784; ++p) out << ",pixel" << p;
  out << "\n";
  for (int64_t i = 0; i < images.dim(0); ++i) {
    out << static_cast<int>(labels.data<uint8_t>()[i]);
    for (int64_t p = 0; p < 784; ++p) out << "," << static_cast<int>(images.data<uint8_t>()[i * 784 + p]);
    out << "\n";
  }
}

// Exports `checkpoint` of the job and predicts the test images: the outputs of the saved model.
Tensor export_and_predict(const std::string& job, const fs::path& checkpoint, const fs::path& dir,
                          const std::string& name) {
  const fs::path model = dir / (name + ".safetensors"), out = dir / (name + ".npy");
  const auto [rc, log] =
      run(kStrata + " export " + job + " --checkpoint " + checkpoint.string() + " -o " + model.string());
  EXPECT_EQ(rc, 0) << log;
  EXPECT_THAT(log, HasSubstr("exported " + model.string() + ": 6 layers, "));
  EXPECT_THAT(log, HasSubstr("input [28, 28, 1] uint8 -> output [-1, 10]"));
  const auto [rc2, log2] = run(kStrata + " predict " + model.string() + " " + (dir / "t10k-images-idx3-ubyte").string() +
                               " -o " + out.string());
  EXPECT_EQ(rc2, 0) << log2;
  EXPECT_THAT(log2, HasSubstr("predicted 64 examples: logits float32 [64, 10] to " + out.string()));
  return io::read_npy(out.string());
}

TEST(ExportPredictCommandTest, OneDeviceExportPredictsTheAccuracyTrainAndEvaluatePrinted) {
  Scratch s("export_one");
  const std::string job = cnn_job(s.dir);
  const fs::path ckpt = s.dir / "ckpt";
  const auto [rc, out] = run(kStrata + " train " + job + " --threads 1 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(rc, 0) << out;
  const std::string trained = printed_accuracy(out);
  ASSERT_NE(trained, "") << out;
  ASSERT_NE(trained, "1.0000") << "a perfect score would not tell predictions apart";
  const auto [rc_eval, eval] = run(kStrata + " evaluate " + job + " --threads 1 --checkpoint " + ckpt.string());
  ASSERT_EQ(rc_eval, 0) << eval;
  EXPECT_EQ(printed_accuracy(eval), trained);

  const Tensor outputs = export_and_predict(job, ckpt, s.dir, "one_device");
  EXPECT_EQ(accuracy_of(outputs, s.dir), trained);
  expect_close(one_device_outputs(job, ckpt), outputs, 1e-6f);

  // The same outputs from .npy inputs (raw uint8 pixels, and the same pixels as float32), and as CSV. The .npy runs
  // predict 64 rows a batch, not 32: oneDNN's AVX2 kernels may then round a sum otherwise, by an ulp.
  Tensor images = data::read_idx((s.dir / "t10k-images-idx3-ubyte").string());
  io::write_npy((s.dir / "images_u8.npy").string(), images);
  io::write_npy((s.dir / "images_f32.npy").string(), images.reshape({64, 28, 28, 1}).to(DType::kFloat32));
  const std::string model = (s.dir / "one_device.safetensors").string();
  for (const std::string input : {"images_u8.npy", "images_f32.npy"}) {
    const auto [rc_npy, log] = run(kStrata + " predict " + model + " " + (s.dir / input).string() + " -o " +
                                   (s.dir / "from_npy.npy").string() + " --batch-size 64");
    ASSERT_EQ(rc_npy, 0) << log;
    expect_close(outputs, io::read_npy((s.dir / "from_npy.npy").string()), 1e-6f);
  }
  // ... from TFRecord files of Examples (plain and gzip; the image feature is found by its size) and from a CSV file
  // with a header and a label column.
  write_examples(s.dir, s.dir / "test.tfrecord", data::Compression::kNone);
  write_examples(s.dir, s.dir / "test.tfrecord.gz", data::Compression::kGzip);
  write_kaggle_csv(s.dir, s.dir / "fashion-mnist_test.csv");
  for (const std::string input : {"test.tfrecord", "test.tfrecord.gz", "fashion-mnist_test.csv"}) {
    const auto [rc_in, log] = run(kStrata + " predict " + model + " " + (s.dir / input).string() + " -o " +
                                  (s.dir / "from_file.npy").string() + " --verbose 0");
    ASSERT_EQ(rc_in, 0) << input << "\n" << log;
    EXPECT_THAT(log, HasSubstr("predicted 64 examples")) << input;
    expect_close(outputs, io::read_npy((s.dir / "from_file.npy").string()), 0.0f);
  }
  const auto [rc_csv, log_csv] = run(kStrata + " predict " + model + " " + (s.dir / "images_u8.npy").string() +
                                     " -o " + (s.dir / "out.csv").string() + " --verbose 0");
  ASSERT_EQ(rc_csv, 0) << log_csv;
  std::istringstream csv(read_file(s.dir / "out.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "output_0,output_1,output_2,output_3,output_4,output_5,output_6,output_7,output_8,output_9");
  std::vector<float> values;
  while (std::getline(csv, line)) {
    std::istringstream row(line);
    for (std::string cell; std::getline(row, cell, ',');) values.push_back(std::stof(cell));
  }
  EXPECT_EQ(values, outputs.to_vector<float>());  // %.9g gives every float32 back exactly
}

TEST(ExportPredictCommandTest, ParameterServerShardsExportToTheOneDeviceModelsPredictions) {
  Scratch s("export_ps");
  const std::string job = cnn_job(s.dir);
  const fs::path ckpt = s.dir / "ps_ckpt";
  std::ofstream(s.dir / "task.sh") << "exec " << kStrata << " train " << job
                                   << " --strategy parameter_server --threads 1 --verbose 2 --checkpoint-dir "
                                   << ckpt.string() << "\n";
  const auto [rc, out] = run("timeout -k 5 240 " + kStrata + " launch --chief --workers 2 --ps 2 -- sh " +
                             (s.dir / "task.sh").string());
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(fs::exists(ckpt / "ps_checkpoint.json")) << out;
  const Tensor outputs = export_and_predict(job, ckpt, s.dir, "ps");
  expect_close(one_device_outputs(job, ckpt), outputs, 1e-6f);
  // The chief evaluated the model the ps held at the end, which is the checkpoint's.
  EXPECT_EQ(accuracy_of(outputs, s.dir), printed_accuracy(out)) << out;
}

TEST(ExportPredictCommandTest, MultiWorkerMirroredAndPipelineCheckpointsExportTheirModels) {
  Scratch s("export_strategies");
  const std::string job = cnn_job(s.dir);
  const fs::path one = s.dir / "one", workers = s.dir / "workers", mirrored = s.dir / "mirrored",
                 pipeline = s.dir / "pipeline";
  const auto [rc1, out1] = run(kStrata + " train " + job + " --threads 1 --checkpoint-dir " + one.string());
  ASSERT_EQ(rc1, 0) << out1;
  const auto [rc2, out2] =
      run("timeout -k 5 180 " + kStrata + " launch --workers 2 -- " + kStrata + " train " + job +
          " --strategy multi_worker_mirrored --threads 1 --checkpoint-dir " + workers.string());
  ASSERT_EQ(rc2, 0) << out2;
  const auto [rc3, out3] = run(kStrata + " train " + job + " --strategy mirrored --replicas 2 --threads 2 " +
                               "--checkpoint-dir " + mirrored.string());
  ASSERT_EQ(rc3, 0) << out3;
  const auto [rc4, out4] = run(kStrata + " train " + job + " --strategy pipeline --stages 2 --micro-batches 2 " +
                               "--threads 1 --checkpoint-dir " + pipeline.string());
  ASSERT_EQ(rc4, 0) << out4;

  const Tensor one_device = export_and_predict(job, one, s.dir, "one");
  for (const auto& [name, ckpt, log] : {std::tuple{"workers", workers, out2}, std::tuple{"mirrored", mirrored, out3},
                                         std::tuple{"pipeline", pipeline, out4}}) {
    SCOPED_TRACE(name);
    const Tensor outputs = export_and_predict(job, ckpt, s.dir, name);
    expect_close(one_device_outputs(job, ckpt), outputs, 1e-6f);
    EXPECT_EQ(accuracy_of(outputs, s.dir), printed_accuracy(log)) << log;
    // Each strategy trains the one-device model's weights (to float rounding of its sums), so it predicts the same.
    expect_close(one_device, outputs, 1e-3f);
  }
}

TEST(ExportPredictCommandTest, BadInputsAreClearErrorsNotCrashes) {
  Scratch s("export_errors");
  const std::string job = cnn_job(s.dir);
  const fs::path ckpt = s.dir / "ckpt", model = s.dir / "model.safetensors";
  const auto [rc, out] = run(kStrata + " train " + job + " --threads 1 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(rc, 0) << out;
  const auto expect_error = [](const std::string& command, const std::string& message) {
    const auto [status, log] = run(command);
    EXPECT_EQ(status, 1) << command << "\n" << log;  // an error, not a signal
    EXPECT_THAT(log, HasSubstr("strata: error: " + message)) << command;
  };
  const std::string export_cmd = kStrata + " export " + job + " --checkpoint ";
  expect_error(export_cmd + ckpt.string() + " -o " + (s.dir / "model.pb").string(),
               "-o " + (s.dir / "model.pb").string() +
                   ": unknown model format '.pb'; supported: .safetensors (a saved model: architecture and weights) "
                   "and .onnx (ONNX, opset 17)");
  expect_error(export_cmd + (s.dir / "nothing").string() + " -o " + (s.dir / "model.onnx").string(),
               "no checkpoint at '" + (s.dir / "nothing").string() + "'");
  expect_error(export_cmd + (s.dir / "nothing").string() + " -o " + model.string(),
               "no checkpoint at '" + (s.dir / "nothing").string() + "'");
  EXPECT_FALSE(fs::exists(model));
  const auto [rc_export, log_export] = run(export_cmd + ckpt.string() + " -o " + model.string());
  ASSERT_EQ(rc_export, 0) << log_export;

  const std::string predict = kStrata + " predict " + model.string() + " ";
  Tensor wrong = Tensor::zeros({5, 27, 28}, DType::kUInt8);
  io::write_npy((s.dir / "wrong.npy").string(), wrong);
  expect_error(predict + (s.dir / "wrong.npy").string() + " -o " + (s.dir / "p.npy").string(),
               "input '" + (s.dir / "wrong.npy").string() +
                   "' holds examples of shape [27, 28] (5 of them, uint8), but the model takes examples of shape "
                   "[28, 28, 1] (uint8)");
  expect_error(predict + (s.dir / "wrong.npy").string() + " -o " + (s.dir / "p.txt").string(),
               "-o " + (s.dir / "p.txt").string() + ": unknown output format '.txt'; supported: .npy");
  expect_error(predict + job + " -o " + (s.dir / "p.npy").string(), "input '" + job + "': unknown format");
  // A CSV row one value longer than an image, with no header to say which column is the label.
  {
    std::ofstream rows(s.dir / "rows.csv");
    rows << "3";
    for (int k = 0; k < 784; ++k) rows << ",0";
    rows << "\n";
  }
  expect_error(predict + (s.dir / "rows.csv").string() + " -o " + (s.dir / "p.npy").string(),
               "input '" + (s.dir / "rows.csv").string() +
                   "' has 785 columns per row, but the model takes 784 values per example (shape [28, 28, 1]); if "
                   "one column is the label, give the file a header naming it 'label'");
  // Examples where two features could be the image, and one where none can.
  {
    data::TFRecordWriter out((s.dir / "two.tfrecord").string());
    out.write(data::Example()
                  .set_bytes("image", std::string(784, '\0'))
                  .set_floats("image_float", std::vector<float>(784, 0.0f))
                  .serialize());
    out.close();
    data::TFRecordWriter none((s.dir / "none.tfrecord").string());
    none.write(data::Example().set_bytes("image", std::string(783, '\0')).serialize());
    none.close();
  }
  expect_error(predict + (s.dir / "two.tfrecord").string() + " -o " + (s.dir / "p.npy").string(),
               "input '" + (s.dir / "two.tfrecord").string() +
                   "': several features could be the input (image, image_float): name one with --x");
  expect_error(predict + (s.dir / "none.tfrecord").string() + " -o " + (s.dir / "p.npy").string(),
               "input '" + (s.dir / "none.tfrecord").string() +
                   "': no feature of its first Example holds one example of the model's input [28, 28, 1] (784 "
                   "values); it has image (bytes_list, 1 value of 783 bytes)");
  expect_error(predict + (s.dir / "wrong.npy").string() + " --x image -o " + (s.dir / "p.npy").string(),
               "--x image: names a TFRecord Example's feature; '" + (s.dir / "wrong.npy").string() +
                   "' is not a TFRecord file");
  const auto [rc_x, log_x] = run(predict + (s.dir / "two.tfrecord").string() + " --x image_float -o " +
                                 (s.dir / "two.npy").string() + " --verbose 0");
  EXPECT_EQ(rc_x, 0) << log_x;
  EXPECT_THAT(log_x, HasSubstr("predicted 1 example: logits float32 [1, 10]"));
  std::ofstream(s.dir / "broken.npy") << "\x93NUMPY garbage";
  expect_error(predict + (s.dir / "broken.npy").string() + " -o " + (s.dir / "p.npy").string(),
               (s.dir / "broken.npy").string() + ": unknown .npy format version 32.103 (known: 1.0, 2.0, 3.0)");
  // A checkpoint's weights file is not a saved model.
  const fs::path weights = s.dir / "weights.safetensors";
  std::shared_ptr<Sequential> plain = build_model(load_job(job));
  plain->build_for({1, 28, 28, 1});
  plain->save_weights(weights.string());
  expect_error(kStrata + " predict " + weights.string() + " " + (s.dir / "wrong.npy").string() + " -o " +
                   (s.dir / "p.npy").string(),
               weights.string() + ": not a saved model");
  EXPECT_FALSE(fs::exists(s.dir / "p.npy"));
}

}  // namespace
// -o MODEL.onnx: the job's model as ONNX, raw uint8 pixels in (the job's scaling is the Cast and Mul first), its
// layers' ops after; onnxruntime's agreement with `strata predict` is tests/peers/test_onnx_export.py's.
TEST(ExportPredictCommandTest, OnnxExportWritesTheJobsModelWithItsScalingFirst) {
  Scratch s("export_onnx");
  const std::string job = cnn_job(s.dir);
  const fs::path ckpt = s.dir / "ckpt", model = s.dir / "model.onnx";
  const auto [rc, out] = run(kStrata + " train " + job + " --threads 1 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(rc, 0) << out;
  const auto [rc_export, log] = run(kStrata + " export " + job + " --checkpoint " + ckpt.string() + " -o " +
                                    model.string());
  ASSERT_EQ(rc_export, 0) << log;
  EXPECT_THAT(log, HasSubstr("exported " + model.string()));
  std::ifstream in(model, std::ios::binary);
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromIstream(&in));
  std::vector<std::string> ops;
  for (const onnx::NodeProto& node : proto.graph().node()) ops.push_back(node.op_type());
  ASSERT_GE(ops.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(ops.begin(), ops.begin() + 4),
            (std::vector<std::string>{"Cast", "Mul", "Transpose", "Conv"}));
  EXPECT_EQ(ops.back(), "Gemm");
  EXPECT_EQ(proto.graph().input(0).type().tensor_type().elem_type(), onnx::TensorProto::UINT8);
}

}  // namespace strata::cli
