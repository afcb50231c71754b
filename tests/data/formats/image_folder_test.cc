// Image folders (strata/data/image_folder.h, Dataset::from_image_folder): PNG files (written with libpng) decode to
// exactly their pixels and JPEG files (libjpeg-turbo) to within the codec's loss, in either color mode; the bilinear
// resize follows half-pixel centers; labels follow the sorted class folder names; other files are skipped; and the
// folders Keras refuses are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "data/dataset_test_util.h"
#include "image_writer.h"
#include "strata/data/dataset.h"
#include "strata/data/image_folder.h"
#include "strata/random.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;
using test::message_of;

class ImageFolderTest : public test::ScratchDirTest {
 protected:
  ImageFolderTest() : ScratchDirTest("image_folder") {}
  std::string mkdir(const std::string& rel) {
    fs::create_directories(dir_ / rel);
    return path(rel);
  }
};

Tensor random_image(int64_t h, int64_t w, int64_t c, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty({h, w, c}, DType::kUInt8);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(gen.uniform_int(256));
  return t;
}

// A smooth image (JPEG keeps smooth images close): a gradient per channel.
Tensor smooth_image(int64_t h, int64_t w, int64_t c) {
  Tensor t = Tensor::empty({h, w, c}, DType::kUInt8);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k)
        t.data<uint8_t>()[(y * w + x) * c + k] = static_cast<uint8_t>(40 + y * 4 + x * 3 + k * 20);  // at most 209 for 16 x 24
  return t;
}

Tensor filled(int64_t h, int64_t w, int64_t c, uint8_t v) {
  Tensor t = Tensor::empty({h, w, c}, DType::kUInt8);
  std::fill_n(t.data<uint8_t>(), t.numel(), v);
  return t;
}

std::vector<int> pixels(const Tensor& t) {
  std::vector<int> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = t.data<uint8_t>()[i];
  return out;
}

int luma(int r, int g, int b) { return static_cast<int>(std::lround(0.299 * r + 0.587 * g + 0.114 * b)); }

TEST_F(ImageFolderTest, PngDecodesToExactlyItsPixelsInEitherColorMode) {
  const Tensor rgb = random_image(5, 7, 3, 1), gray = random_image(6, 4, 1, 2), rgba = random_image(3, 5, 4, 3);
  strata::test::write_png(path("rgb.png"), rgb);
  strata::test::write_png(path("gray.png"), gray);
  strata::test::write_png(path("rgba.png"), rgba);
  const Tensor got_rgb = read_image(path("rgb.png"), ColorMode::kRgb);
  EXPECT_EQ(got_rgb.shape(), (Shape{5, 7, 3}));
  EXPECT_EQ(pixels(got_rgb), pixels(rgb));
  EXPECT_EQ(pixels(read_image(path("gray.png"), ColorMode::kGrayscale)), pixels(gray));

  // Gray as rgb: the value in all three channels. RGBA: alpha dropped.
  const Tensor gray3 = read_image(path("gray.png"), ColorMode::kRgb);
  ASSERT_EQ(gray3.shape(), (Shape{6, 4, 3}));
  const std::vector<int> g = pixels(gray), g3 = pixels(gray3);
  for (size_t i = 0; i < g.size(); ++i) {
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(g3[i * 3 + k], g[i]);
  }
  const Tensor no_alpha = read_image(path("rgba.png"), ColorMode::kRgb);
  ASSERT_EQ(no_alpha.shape(), (Shape{3, 5, 3}));
  const std::vector<int> a = pixels(rgba), na = pixels(no_alpha);
  for (size_t i = 0; i < na.size() / 3; ++i) {
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(na[i * 3 + k], a[i * 4 + k]);
  }
  // RGB as grayscale: ITU-R 601 luma (0.299, 0.587, 0.114), to within rounding.
  const Tensor luma_image = read_image(path("rgb.png"), ColorMode::kGrayscale);
  ASSERT_EQ(luma_image.shape(), (Shape{5, 7, 1}));
  const std::vector<int> c = pixels(rgb), l = pixels(luma_image);
  for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(l[i], luma(c[i * 3], c[i * 3 + 1], c[i * 3 + 2]), 1) << i;
}

TEST_F(ImageFolderTest, JpegDecodesToWithinTheCodecsLoss) {
  const Tensor rgb = smooth_image(16, 24, 3), gray = smooth_image(16, 16, 1);
  strata::test::write_jpeg(path("rgb.jpg"), rgb);
  strata::test::write_jpeg(path("gray.jpeg"), gray);
  const Tensor got = read_image(path("rgb.jpg"), ColorMode::kRgb);
  ASSERT_EQ(got.shape(), (Shape{16, 24, 3}));
  const std::vector<int> want = pixels(rgb), have = pixels(got);
  double total = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(have[i], want[i], 16) << i;
    total += std::abs(have[i] - want[i]);
  }
  EXPECT_LT(total / static_cast<double>(want.size()), 3.0);
  const std::vector<int> g = pixels(gray), got_gray = pixels(read_image(path("gray.jpeg"), ColorMode::kGrayscale));
  ASSERT_EQ(got_gray.size(), g.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(got_gray[i], g[i], 8) << i;
  // Color JPEG as grayscale: the luma of what it decodes to in color.
  const std::vector<int> l = pixels(read_image(path("rgb.jpg"), ColorMode::kGrayscale));
  ASSERT_EQ(l.size(), have.size() / 3);
  for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(l[i], luma(have[i * 3], have[i * 3 + 1], have[i * 3 + 2]), 3) << i;
}

TEST_F(ImageFolderTest, DamagedOrForeignFilesAreErrorsNamingTheFile) {
  strata::test::write_jpeg(path("whole.jpg"), random_image(64, 64, 3, 9));  // noise: mostly scan data
  const std::string jpeg = test::file_bytes(path("whole.jpg"));
  test::put_bytes(path("cut.jpg"), jpeg.substr(0, jpeg.size() / 2));
  const std::string cut = message_of<DataCorrupt>([&] { read_image(path("cut.jpg"), ColorMode::kRgb); });
  EXPECT_NE(cut.find(path("cut.jpg")), std::string::npos) << cut;
  EXPECT_NE(cut.find("truncated"), std::string::npos) << cut;

  strata::test::write_png(path("whole.png"), random_image(32, 32, 3, 4));
  const std::string png = test::file_bytes(path("whole.png"));
  test::put_bytes(path("cut.png"), png.substr(0, png.size() / 2));
  EXPECT_NE(message_of<DataCorrupt>([&] { read_image(path("cut.png"), ColorMode::kRgb); }).find(path("cut.png")),
            std::string::npos);
  std::string flipped = png;
  flipped[png.size() / 2] ^= 0x40;  // inside the IDAT data: its CRC no longer matches
  test::put_bytes(path("flipped.png"), flipped);
  EXPECT_THROW(read_image(path("flipped.png"), ColorMode::kRgb), DataCorrupt);

  test::put_bytes(path("text.png"), "not an image at all");
  EXPECT_NE(message_of<InvalidArgument>([&] { read_image(path("text.png"), ColorMode::kRgb); })
                .find("not a JPEG or PNG image"),
            std::string::npos);
  EXPECT_THROW(read_image(path("missing.png"), ColorMode::kRgb), IoError);
}

TEST_F(ImageFolderTest, ResizeIsBilinearWithHalfPixelCenters) {
  // 2 -> 4 along each axis samples x = -0.25, 0.25, 0.75, 1.25: a, a + (b - a) / 4, a + 3 (b - a) / 4, b.
  Tensor two = Tensor::empty({1, 2, 1}, DType::kUInt8);
  two.data<uint8_t>()[0] = 20, two.data<uint8_t>()[1] = 220;
  const std::vector<int> up = pixels(resize_bilinear(two, 1, 4));
  const int a = 20, b = 220;
  EXPECT_EQ(up, (std::vector<int>{a, static_cast<int>(std::lround(a + (b - a) * 0.25)),
                                  static_cast<int>(std::lround(a + (b - a) * 0.75)), b}));
  // Halving samples x = 2i + 0.5: the mean of each 2 x 2 block.
  const Tensor big = random_image(4, 6, 3, 5);
  const Tensor half = resize_bilinear(big, 2, 3);
  ASSERT_EQ(half.shape(), (Shape{2, 3, 3}));
  const std::vector<int> p = pixels(big), h = pixels(half);
  auto at = [&](int64_t y, int64_t x, int64_t k) { return p[static_cast<size_t>((y * 6 + x) * 3 + k)]; };
  for (int64_t y = 0; y < 2; ++y) {
    for (int64_t x = 0; x < 3; ++x) {
      for (int64_t k = 0; k < 3; ++k) {
        const double mean = (at(2 * y, 2 * x, k) + at(2 * y, 2 * x + 1, k) + at(2 * y + 1, 2 * x, k) +
                             at(2 * y + 1, 2 * x + 1, k)) / 4.0;
        EXPECT_NEAR(h[static_cast<size_t>((y * 3 + x) * 3 + k)], mean, 0.5 + 1e-4);
      }
    }
  }
  EXPECT_EQ(pixels(resize_bilinear(big, 4, 6)), p);  // the same size: unchanged
  EXPECT_EQ(pixels(resize_bilinear(filled(3, 5, 1, 77), 7, 2)), std::vector<int>(14, 77));
}

// Class folders "Dog", "bird", "cat" (sorted in byte order: uppercase first, as Python's sorted()). Each image's
// pixels are its label * 10 + its index in the class, so an element tells which file it came from.
struct Layout {
  std::vector<std::string> classes = {"Dog", "bird", "cat"};
  std::vector<std::pair<int64_t, uint8_t>> elements;  // (label, pixel value) in Keras's order
};

Layout write_folder(const std::string& root, bool jpeg_too) {
  Layout layout;
  fs::create_directories(root + "/cat/nested");
  fs::create_directories(root + "/Dog");
  fs::create_directories(root + "/bird");
  // Written out of order; Keras's order is by class, then by path.
  strata::test::write_png(root + "/cat/b.png", filled(3, 4, 3, 21));
  strata::test::write_png(root + "/cat/a.PNG", filled(6, 8, 3, 20));
  strata::test::write_png(root + "/cat/nested/c.png", filled(3, 4, 1, 22));
  strata::test::write_png(root + "/Dog/x.png", filled(3, 4, 3, 0));
  if (jpeg_too) strata::test::write_jpeg(root + "/bird/1.jpeg", filled(8, 8, 3, 10));
  test::put_bytes(root + "/bird/notes.txt", "skipped");
  test::put_bytes(root + "/cat/.DS_Store", "skipped");
  test::put_bytes(root + "/top_level.png", "not in a class folder: not read");
  layout.elements = {{0, 0}, {2, 20}, {2, 21}, {2, 22}};
  if (jpeg_too) layout.elements.insert(layout.elements.begin() + 1, {1, 10});
  return layout;
}

TEST_F(ImageFolderTest, LabelsFollowSortedClassNamesAndOtherFilesAreSkipped) {
  const std::string root = mkdir("pets");
  const Layout layout = write_folder(root, true);
  const ImageFolderFiles files = list_image_folder(root);
  EXPECT_EQ(files.class_names, layout.classes);
  EXPECT_EQ(files.paths.size(), layout.elements.size());
  EXPECT_EQ(files.paths[1], root + "/bird/1.jpeg");
  EXPECT_EQ(files.paths[2], root + "/cat/a.PNG");
  EXPECT_EQ(files.paths[4], root + "/cat/nested/c.png");

  for (ColorMode mode : {ColorMode::kGrayscale, ColorMode::kRgb}) {
    const Dataset d =
        Dataset::from_image_folder(root, {.height = 5, .width = 3, .color_mode = mode, .shuffle = false});
    EXPECT_EQ(d.cardinality(), static_cast<int64_t>(layout.elements.size()));
    size_t i = 0;
    for (Iterator it = d.make_iterator(); auto e = it.next(); ++i) {
      ASSERT_LT(i, layout.elements.size());
      ASSERT_EQ(e->names(), (std::vector<std::string>{"image", "label"}));
      EXPECT_EQ((*e)["label"].dtype(), DType::kInt64);
      EXPECT_EQ((*e)["label"].data<int64_t>()[0], layout.elements[i].first) << i;
      const Tensor& image = (*e)["image"];
      EXPECT_EQ(image.dtype(), DType::kUInt8);
      ASSERT_EQ(image.shape(), (Shape{5, 3, channels_of(mode)}));
      for (int v : pixels(image)) EXPECT_NEAR(v, layout.elements[i].second, 1) << i;  // (the JPEG's one: near)
    }
    EXPECT_EQ(i, layout.elements.size());
  }

  // Shuffled: every file once per iteration, in an order that changes between iterations but not between runs.
  const ImageFolderOptions shuffled{.height = 2, .width = 2, .color_mode = ColorMode::kGrayscale, .seed = 7};
  auto order = [](const Dataset& d) {
    std::vector<int> values;
    for (Iterator it = d.make_iterator(); auto e = it.next();) values.push_back(pixels((*e)["image"])[0] / 2);
    return values;
  };
  const Dataset d1 = Dataset::from_image_folder(root, shuffled), d2 = Dataset::from_image_folder(root, shuffled);
  const std::vector<int> first = order(d1);
  EXPECT_EQ(first, order(d2));
  std::vector<int> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 5, 10, 10, 11}));
  bool changed = false;
  for (int k = 0; k < 10 && !changed; ++k) changed = order(d1) != first;
  EXPECT_TRUE(changed) << "the order never changed between iterations";
}

TEST_F(ImageFolderTest, ValidationSplitGivesDisjointSubsets) {
  const std::string root = mkdir("many");
  for (int c = 0; c < 2; ++c) {
    fs::create_directories(root + "/class" + std::to_string(c));
    for (int i = 0; i < 10; ++i) {
      strata::test::write_png(root + "/class" + std::to_string(c) + "/" + std::to_string(i) + ".png",
                      filled(2, 2, 1, static_cast<uint8_t>(c * 100 + i)));
    }
  }
  auto values = [&](const std::string& subset) {
    const Dataset d = Dataset::from_image_folder(root, {.height = 2, .width = 2, .color_mode = ColorMode::kGrayscale,
                                                        .shuffle = false, .seed = 3, .validation_split = 0.25,
                                                        .subset = subset});
    std::vector<int> v;
    for (Iterator it = d.make_iterator(); auto e = it.next();) {
      const int pixel = pixels((*e)["image"])[0];
      EXPECT_EQ((*e)["label"].data<int64_t>()[0], pixel / 100);
      v.push_back(pixel);
    }
    return v;
  };
  const std::vector<int> train = values("training"), val = values("validation");
  EXPECT_EQ(train.size(), 15u);
  EXPECT_EQ(val.size(), 5u);
  std::set<int> all(train.begin(), train.end());
  all.insert(val.begin(), val.end());
  EXPECT_EQ(all.size(), 20u);
  EXPECT_NE(std::set<int>(val.begin(), val.end()), std::set<int>({105, 106, 107, 108, 109}))
      << "the split should not be the last files of the last class";
  EXPECT_NE(message_of<InvalidArgument>([&] {
              Dataset::from_image_folder(root, {.validation_split = 0.2, .subset = "training"});
            }).find("needs a seed"),
            std::string::npos);
}

TEST_F(ImageFolderTest, FoldersKerasRefusesAreClearErrors) {
  EXPECT_THROW(list_image_folder(path("absent")), IoError);
  const std::string flat = mkdir("flat");
  strata::test::write_png(flat + "/a.png", filled(2, 2, 1, 1));
  const std::string no_classes = message_of<InvalidArgument>([&] { list_image_folder(flat); });
  EXPECT_NE(no_classes.find("has no class folders"), std::string::npos) << no_classes;
  EXPECT_NE(no_classes.find(flat), std::string::npos) << no_classes;

  const std::string empty = mkdir("empty");
  mkdir("empty/a");
  mkdir("empty/b");
  test::put_bytes(empty + "/a/readme.md", "no images");
  const std::string no_images = message_of<InvalidArgument>([&] { Dataset::from_image_folder(empty); });
  EXPECT_NE(no_images.find("no images"), std::string::npos) << no_images;
  EXPECT_NE(no_images.find("(a, b)"), std::string::npos) << no_images;

  const std::string gif = mkdir("gif");
  mkdir("gif/a");
  test::put_bytes(gif + "/a/anim.GIF", "GIF89a");
  const std::string g = message_of<InvalidArgument>([&] { list_image_folder(gif); });
  EXPECT_NE(g.find("anim.GIF"), std::string::npos) << g;
  EXPECT_NE(g.find("JPEG and PNG only"), std::string::npos) << g;

  const std::string pets = mkdir("pets");
  write_folder(pets, false);
  const std::string classes = message_of<InvalidArgument>([&] { list_image_folder(pets, {"cat", "Dog"}); });
  EXPECT_NE(classes.find("must be exactly its class folders (Dog, bird, cat)"), std::string::npos) << classes;
  const ImageFolderFiles reordered = list_image_folder(pets, {"cat", "bird", "Dog"});
  EXPECT_EQ(reordered.labels, (std::vector<int64_t>{0, 0, 0, 2}));  // cat's three, then Dog's one
  EXPECT_THROW(parse_color_mode("rgba"), InvalidArgument);
}

}  // namespace
}  // namespace strata::data
