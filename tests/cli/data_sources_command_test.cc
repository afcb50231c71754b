// The job file's NumPy and image-folder sources (src/cli/job.h: data formats npy, npz and image_folder) end to end:
// `strata train` learns from each, `strata export` takes the input's dtype (float32 arrays go in as they are, uint8
// behind a Rescaling), the validation section reads the same kinds, and bad inputs fail naming the file.
#include <gtest/gtest.h>

#include <regex>

#include "cli/cli_test_util.h"
#include "cli/job.h"
#include "image_writer.h"
#include "npz_writer.h"
#include "strata/data/idx.h"
#include "strata/io/npy.h"
#include "test_util.h"

namespace strata::cli {
namespace {

const std::string kStrata = STRATA_BINARY;

// The tiny IDX data of cli_test_util.h as arrays: x uint8 [n, 28, 28], y uint8 [n].
std::pair<Tensor, Tensor> tiny_arrays(const fs::path& dir, const std::string& prefix, int n, uint32_t seed) {
  write_tiny_idx(dir, prefix, n, seed);
  return {data::read_idx((dir / (prefix + "-images-idx3-ubyte")).string()),
          data::read_idx((dir / (prefix + "-labels-idx1-ubyte")).string())};
}

const char* const kRest =
    "model:\n  - flatten\n  - dense: {units: 10}\n"
    "loss: {name: sparse_categorical_crossentropy, from_logits: true}\n"
    "optimizer: {name: adam, learning_rate: 0.01}\nmetrics: [accuracy]\nepochs: 1\nbatch_size: 32\n";

double test_accuracy(const std::string& out) {
  std::smatch m;
  const std::string line = last_line(out);
  if (!std::regex_match(line, m, std::regex(R"(test loss [0-9.]+ - test accuracy ([0-9.]+))"))) return -1;
  return std::stod(m[1]);
}

TEST(DataSourcesCommandTest, TrainsFromNpyFilesAndExportsUint8InputsBehindARescaling) {
  Scratch s("npy_source");
  const auto [x, y] = tiny_arrays(s.dir, "train", 512, 1);
  const auto [tx, ty] = tiny_arrays(s.dir, "t10k", 64, 2);
  io::write_npy((s.dir / "x.npy").string(), x);
  io::write_npy((s.dir / "y.npy").string(), y);
  io::write_npy((s.dir / "tx.npy").string(), tx);
  io::write_npy((s.dir / "ty.npy").string(), ty);
  const std::string job = write_job(s.dir, "data: {format: npy, x: " + (s.dir / "x.npy").string() + ", y: " +
                                               (s.dir / "y.npy").string() + ", test_x: " + (s.dir / "tx.npy").string() +
                                               ", test_y: " + (s.dir / "ty.npy").string() + ", shuffle: 512}\n" + kRest);
  const fs::path ckpt = s.dir / "ckpt";
  const auto [rc, out] = run(kStrata + " train " + job + " --threads 1 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("Epoch 1/1"), std::string::npos) << out;
  EXPECT_GT(test_accuracy(out), 0.5) << out;  // ten classes: chance is 0.1

  const fs::path model = s.dir / "m.safetensors";
  const auto [rc2, log] = run(kStrata + " export " + job + " --checkpoint " + ckpt.string() + " -o " + model.string());
  ASSERT_EQ(rc2, 0) << log;
  EXPECT_NE(log.find(": 3 layers, "), std::string::npos) << log;  // Rescaling, flatten, dense
  EXPECT_NE(log.find("input [28, 28] uint8 -> output [-1, 10]"), std::string::npos) << log;
}

TEST(DataSourcesCommandTest, TrainsFromADeflatedNpzOfFloatsUsedAsTheyAre) {
  Scratch s("npz_source");
  const auto [x, y] = tiny_arrays(s.dir, "train", 512, 3);
  const auto [tx, ty] = tiny_arrays(s.dir, "t10k", 64, 4);
  const Tensor xf = x.to(DType::kFloat32), txf = tx.to(DType::kFloat32);
  // Keras's mnist.npz names: the job's defaults.
  test::write_npz((s.dir / "data.npz").string(), {{"x_train", xf}, {"y_train", y}, {"x_test", txf}, {"y_test", ty}},
                  true);
  const std::string job = write_job(s.dir, "data: {format: npz, file: " + (s.dir / "data.npz").string() +
                                               ", shuffle: 0}\n" + kRest);
  const Job loaded = load_job(job);
  EXPECT_EQ(input_shape(loaded), (Shape{32, 28, 28}));
  EXPECT_EQ(input_dtype(loaded), DType::kFloat32);
  // The first batch is the first 32 rows, unscaled (Keras does not rescale float arrays); y becomes int64.
  auto it = train_dataset(loaded).make_iterator();
  const auto batch = it.next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ((*batch)[0].to_vector<float>(), xf.slice(0, 32).to_vector<float>());
  EXPECT_EQ((*batch)[1].dtype(), DType::kInt64);
  EXPECT_EQ((*batch)[1].to_vector<int64_t>(), y.slice(0, 32).to(DType::kInt64).to_vector<int64_t>());

  const fs::path ckpt = s.dir / "ckpt";
  // Pixels 0..255 as floats are large inputs: a small rate learns them.
  const std::string slow = std::regex_replace(read_file(job), std::regex("learning_rate: 0.01"), "learning_rate: 0.0005");
  write_job(s.dir, slow);
  const auto [rc, out] = run(kStrata + " train " + job + " --threads 1 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_GT(test_accuracy(out), 0.5) << out;
  const fs::path model = s.dir / "m.safetensors";
  const auto [rc2, log] = run(kStrata + " export " + job + " --checkpoint " + ckpt.string() + " -o " + model.string());
  ASSERT_EQ(rc2, 0) << log;
  EXPECT_NE(log.find(": 2 layers, "), std::string::npos) << log;  // no Rescaling in front
  EXPECT_NE(log.find("input [28, 28] float32 -> output [-1, 10]"), std::string::npos) << log;
}

// Three classes of 20 x 20 gray images, class k lighting the band of rows 6k..6k+5 (plus noise); even ones PNG, odd
// ones JPEG, and a stray text file per class.
void write_image_folder(const fs::path& root, int per_class, uint32_t seed) {
  uint32_t state = seed;
  auto next = [&state] { return state = state * 1664525u + 1013904223u; };
  const char* const classes[] = {"circle", "square", "triangle"};
  for (int k = 0; k < 3; ++k) {
    fs::create_directories(root / classes[k]);
    std::ofstream(root / classes[k] / "notes.txt") << "not an image";
    for (int i = 0; i < per_class; ++i) {
      Tensor image = Tensor::empty({20, 20, 1}, DType::kUInt8);
      for (int r = 0; r < 20; ++r) {
        for (int c = 0; c < 20; ++c) {
          image.data<uint8_t>()[r * 20 + c] = static_cast<uint8_t>((next() >> 26) + (r / 6 == k ? 180 : 0));
        }
      }
      const fs::path file = root / classes[k] / (std::to_string(i) + (i % 2 == 0 ? ".png" : ".jpg"));
      if (i % 2 == 0) {
        test::write_png(file.string(), image);
      } else {
        test::write_jpeg(file.string(), image);
      }
    }
  }
}

TEST(DataSourcesCommandTest, TrainsFromAnImageFolderResizedWithAValidationSplit) {
  Scratch s("image_folder_source");
  write_image_folder(s.dir / "train", 40, 5);
  write_image_folder(s.dir / "test", 10, 6);
  const std::string job = write_job(
      s.dir, "data: {format: image_folder, train: " + (s.dir / "train").string() + ", test: " +
                 (s.dir / "test").string() + ", image_size: [10, 10], color_mode: grayscale, shuffle: 100}\n" +
                 std::regex_replace(std::regex_replace(kRest, std::regex("units: 10"), "units: 3"), std::regex("epochs: 1"),
                                    "epochs: 5") +
                 "validation: {split: 0.25}\n");
  const Job loaded = load_job(job);
  EXPECT_EQ(input_shape(loaded), (Shape{32, 10, 10, 1}));
  EXPECT_EQ(input_dtype(loaded), DType::kUInt8);
  EXPECT_EQ(test_dataset(loaded).cardinality(), 1);  // 30 test images: one batch

  const auto [rc, out] = run(kStrata + " train " + job + " --threads 1");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("val_loss"), std::string::npos) << out;
  EXPECT_GT(test_accuracy(out), 0.6) << out;  // three classes: chance is 0.33
}

TEST(DataSourcesCommandTest, ValidationSourcesOfEachKindAndTheirErrors) {
  Scratch s("data_source_validation");
  const auto [x, y] = tiny_arrays(s.dir, "train", 40, 7);
  const auto [vx, vy] = tiny_arrays(s.dir, "val", 24, 8);
  const std::string xs = (s.dir / "x.npy").string(), ys = (s.dir / "y.npy").string();
  io::write_npy(xs, x);
  io::write_npy(ys, y);
  io::write_npy((s.dir / "vx.npy").string(), vx);
  io::write_npy((s.dir / "vy.npy").string(), vy);
  test::write_npz((s.dir / "v.npz").string(), {{"a", vx}, {"b", vy}}, false);
  const std::string npy_data = "data: {format: npy, x: " + xs + ", y: " + ys + ", test_x: " + xs + ", test_y: " + ys +
                               "}\n" + kRest;
  auto validation_batches = [&](const std::string& data, const std::string& validation) {
    const Job job = load_job(write_job(s.dir, data + "validation: " + validation + "\n"));
    int64_t records = 0;
    for (auto it = validation_dataset(job)->make_iterator(); auto b = it.next();) records += (*b)[0].dim(0);
    return records;
  };
  EXPECT_EQ(validation_batches(npy_data, "{format: npy, x: " + (s.dir / "vx.npy").string() + ", y: " +
                                             (s.dir / "vy.npy").string() + "}"),
            24);
  const std::string npz_data = "data: {format: npz, file: " + (s.dir / "v.npz").string() +
                               ", x: a, y: b, test_x: a, test_y: b}\n" + kRest;
  EXPECT_EQ(validation_batches(npz_data, "{format: npz, file: " + (s.dir / "v.npz").string() + ", x: a, y: b}"), 24);
  EXPECT_EQ(validation_batches(npy_data, "{split: 0.25}"), 10);

  write_image_folder(s.dir / "images", 4, 9);
  write_image_folder(s.dir / "val_images", 2, 10);
  const std::string folder_data = "data: {format: image_folder, train: " + (s.dir / "images").string() +
                                  ", test: " + (s.dir / "images").string() + ", image_size: [8, 8]}\n" + kRest;
  EXPECT_EQ(validation_batches(folder_data, "{format: image_folder, directory: " + (s.dir / "val_images").string() + "}"),
            6);
  EXPECT_EQ(validation_batches(folder_data, "{split: 0.25}"), 3);

  // A validation folder with other classes than the training folder's.
  fs::create_directories(s.dir / "val_images" / "hexagon");
  const std::string classes = test::message_of<InvalidArgument>([&] {
    validation_batches(folder_data, "{format: image_folder, directory: " + (s.dir / "val_images").string() + "}");
  });
  EXPECT_NE(classes.find("must be exactly its class folders"), std::string::npos) << classes;

  // x of int32: named with the file; keys of another format; a missing npz key; a wrong color mode.
  io::write_npy((s.dir / "xi.npy").string(), x.to(DType::kInt32));
  const Job ints = load_job(write_job(s.dir, std::regex_replace(npy_data, std::regex("x: " + xs), "x: " + (s.dir / "xi.npy").string())));
  const std::string dtype = test::message_of<InvalidArgument>([&] { input_shape(ints); });
  EXPECT_NE(dtype.find("xi.npy holds int32"), std::string::npos) << dtype;
  EXPECT_NE(dtype.find("uint8 pixels"), std::string::npos) << dtype;
  EXPECT_THROW(train_dataset(ints), InvalidArgument);
  EXPECT_NE(test::message_of<InvalidArgument>([&] {
              load_job(write_job(s.dir, std::regex_replace(npy_data, std::regex("\\}\n"), ", compression: gzip}\n")));
            }).find("compression"),
            std::string::npos);
  const Job missing = load_job(write_job(s.dir, std::regex_replace(npz_data, std::regex("x: a,"), "x: x_train,")));
  const std::string key = test::message_of<InvalidArgument>([&] { input_shape(missing); });
  EXPECT_NE(key.find("no array 'x_train'"), std::string::npos) << key;
  EXPECT_NE(key.find("it holds a, b"), std::string::npos) << key;
  EXPECT_NE(test::message_of<InvalidArgument>([&] {
              load_job(write_job(s.dir, std::regex_replace(folder_data, std::regex("image_size: \\[8, 8\\]"),
                                                           "image_size: [8, 8], color_mode: rgba")));
            }).find("data.color_mode: expected rgb or grayscale"),
            std::string::npos);
}

TEST(DataSourcesCommandTest, TheFingerprintHoldsTheNewSourcesKeys) {
  Scratch s("data_source_fingerprint");
  auto data_of = [&](const std::string& data) {
    return job_fingerprint(load_job(write_job(s.dir, data + kRest))).at("data");
  };
  const std::string npz = data_of("data: {format: npz, file: a.npz}\n");
  EXPECT_NE(npz, data_of("data: {format: npz, file: a.npz, x: x_other}\n"));
  EXPECT_EQ(npz, data_of("data: {format: npz, file: /elsewhere/a.npz}\n"));  // where it is kept is not the job
  EXPECT_NE(data_of("data: {format: npy, x: a.npy, y: b.npy, test_x: c.npy, test_y: d.npy}\n"),
            data_of("data: {format: npy, x: a2.npy, y: b.npy, test_x: c.npy, test_y: d.npy}\n"));
  const std::string folder = "data: {format: image_folder, train: t, test: u, image_size: [8, 8]";
  EXPECT_NE(data_of(folder + "}\n"), data_of(folder + ", color_mode: grayscale}\n"));
  EXPECT_NE(data_of(folder + "}\n"), data_of(std::regex_replace(folder, std::regex("\\[8, 8\\]"), "[8, 9]") + "}\n"));
}

}  // namespace
}  // namespace strata::cli
