// Image folders, as keras.utils.image_dataset_from_directory reads them: one subfolder per class, the class names
// sorted (byte order, Python's sorted()) giving the labels 0..n-1, every JPEG and PNG file under a class folder (its
// subfolders too) one image of that class.
//
//   cats_and_dogs/train/cat/0001.jpg, cats_and_dogs/train/dog/0001.png, ...
//   auto train = data::Dataset::from_image_folder("cats_and_dogs/train", {.height = 180, .width = 180})
//                    .batch(32);   // elements {"image": uint8 [180, 180, 3], "label": int64 []}
//
// Files are decoded by their content (libjpeg-turbo, libpng), whatever their extension says; which files count is
// their extension, case-insensitively, as Keras's: .jpg, .jpeg and .png are images; Keras's .bmp and .gif are not
// decoded here and are an InvalidArgument naming the file; anything else (.txt, .DS_Store, ...) is skipped. Every
// image is converted to the color mode (grayscale from color by the libraries' ITU-R 601 weights; PNG alpha
// dropped, 16-bit PNG scaled to 8 bits) and resized to height x width bilinearly with half-pixel centers (Keras's
// default interpolation, antialias off), rounded to uint8. A folder that does not exist is IoError; one with no
// class folders or no images, a file that is not a JPEG or PNG, or a damaged or truncated one is InvalidArgument or
// DataCorrupt naming the folder or file.
//
// Thread-safety: pure functions; the dataset is a Dataset (immutable, shared freely).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strata/tensor.h"

namespace strata::data {

enum class ColorMode { kGrayscale, kRgb };
// "grayscale" or "rgb" (Keras's color_mode); InvalidArgument otherwise.
ColorMode parse_color_mode(const std::string& name);
const char* color_mode_name(ColorMode mode);
inline int64_t channels_of(ColorMode mode) { return mode == ColorMode::kGrayscale ? 1 : 3; }

struct ImageFolderOptions {
  int64_t height = 256, width = 256;       // Keras's image_size: every image is resized to it
  ColorMode color_mode = ColorMode::kRgb;
  // Empty: the class folders, sorted. Else the labels' order; it must name exactly the class folders (Keras's
  // class_names), e.g. a test folder read with the training folder's classes.
  std::vector<std::string> class_names;
  // Keras's shuffle: the order of the files, a fresh one each iteration, drawn before any image is decoded. The
  // seed fixes the sequence of orders (default: a random one).
  bool shuffle = true;
  std::optional<uint64_t> seed;
  // Keras's validation_split and subset ("training": the first floor(n * (1 - split)) files, "validation": the
  // rest): the file list is permuted by `seed` (required) before the split, so the two subsets are disjoint.
  double validation_split = 0;
  std::string subset;
  int64_t num_parallel_calls = -1;  // images decoded at once (kAutotune: one per core)
};

// The images of a folder, labelled, in Keras's order (by class, then by path).
struct ImageFolderFiles {
  std::vector<std::string> class_names;
  std::vector<std::string> paths;
  std::vector<int64_t> labels;
};
ImageFolderFiles list_image_folder(const std::string& directory, const std::vector<std::string>& class_names = {});

// A JPEG or PNG image (by its first bytes) as uint8 [height, width, channels_of(mode)]; `name` names it in errors.
Tensor decode_image(std::string_view bytes, ColorMode mode, const std::string& name);
Tensor read_image(const std::string& path, ColorMode mode);
// uint8 [h, w, c] -> uint8 [height, width, c]: bilinear with half-pixel centers (tf.image.resize's default), rounded.
Tensor resize_bilinear(const Tensor& image, int64_t height, int64_t width);

}  // namespace strata::data
