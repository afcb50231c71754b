// Image folders (see strata/data/image_folder.h): listing the class folders and their images as Keras does, and the
// dataset that decodes them, after the file order is drawn, on parallel map workers.
//
// Thread-safety: pure functions; the dataset's map function only reads the shared, immutable file list.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <memory>
#include <system_error>

#include "strata/data/dataset.h"
#include "strata/data/image_folder.h"
#include "strata/error.h"
#include "strata/random.h"

namespace strata::data {

namespace fs = std::filesystem;

namespace {

std::string lower_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return ext;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// The image files under a class folder, sorted by path (Keras walks it recursively, without following links).
std::vector<std::string> images_under(const fs::path& class_dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(class_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string ext = lower_extension(it->path());
    if (ext == ".jpg" || ext == ".jpeg" || ext == ".png") {
      found.push_back(it->path().string());
    } else if (ext == ".bmp" || ext == ".gif") {
      STRATA_THROW(InvalidArgument, it->path().string() << ": Keras reads BMP and GIF images, strata decodes JPEG and "
                                                           "PNG only; convert it (or move it out of the folder)");
    }
  }
  STRATA_CHECK(!ec, IoError, "cannot list '" << class_dir.string() << "': " << ec.message());
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

ImageFolderFiles list_image_folder(const std::string& directory, const std::vector<std::string>& class_names) {
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(directory, ec), IoError,
               "image folder '" << directory << "': " << (fs::exists(directory, ec) ? "not a directory" : "no such directory"));
  std::vector<std::string> folders;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) folders.push_back(it->path().filename().string());
  }
  STRATA_CHECK(!ec, IoError, "cannot list '" << directory << "': " << ec.message());
  std::sort(folders.begin(), folders.end());
  STRATA_CHECK(!folders.empty(), InvalidArgument,
               "image folder '" << directory << "' has no class folders: put each class's images in a subfolder "
                                               "named after the class (" << directory << "/cat/1.jpg, ...)");
  ImageFolderFiles files;
  if (class_names.empty()) {
    files.class_names = folders;
  } else {
    std::vector<std::string> given = class_names;
    std::sort(given.begin(), given.end());
    STRATA_CHECK(given == folders, InvalidArgument,
                 "image folder '" << directory << "': the class names given (" << joined(class_names)
                                  << ") must be exactly its class folders (" << joined(folders) << ")");
    files.class_names = class_names;
  }
  for (size_t label = 0; label < files.class_names.size(); ++label) {
    for (std::string& path : images_under(fs::path(directory) / files.class_names[label])) {
      files.paths.push_back(std::move(path));
      files.labels.push_back(static_cast<int64_t>(label));
    }
  }
  STRATA_CHECK(!files.paths.empty(), InvalidArgument,
               "image folder '" << directory << "': no images (.jpg, .jpeg, .png) in its class folders ("
                                << joined(files.class_names) << ")");
  return files;
}

Dataset Dataset::from_image_folder(const std::string& directory, const ImageFolderOptions& options) {
  STRATA_CHECK(options.height > 0 && options.width > 0, InvalidArgument,
               "from_image_folder: image size must be positive, got " << options.height << " x " << options.width);
  const double split = options.validation_split;
  STRATA_CHECK(split >= 0 && split < 1, InvalidArgument,
               "from_image_folder: validation_split must be in [0, 1), got " << split);
  STRATA_CHECK((split == 0) == options.subset.empty(), InvalidArgument,
               "from_image_folder: validation_split and subset (training or validation) go together");
  STRATA_CHECK(options.subset.empty() || options.subset == "training" || options.subset == "validation",
               InvalidArgument, "from_image_folder: subset must be training or validation, got '" << options.subset << "'");
  STRATA_CHECK(split == 0 || options.seed.has_value(), InvalidArgument,
               "from_image_folder: validation_split needs a seed (both subsets permute the files with it)");

  auto files = std::make_shared<ImageFolderFiles>(list_image_folder(directory, options.class_names));
  const auto n = static_cast<int64_t>(files->paths.size());
  // The files this dataset reads, as indices into the listing.
  std::vector<int64_t> chosen(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) chosen[static_cast<size_t>(i)] = i;
  if (split > 0) {
    Generator gen(*options.seed, 0);
    for (size_t i = chosen.size(); i > 1; --i) std::swap(chosen[i - 1], chosen[gen.uniform_int(i)]);
    const auto kept = static_cast<int64_t>(std::floor(static_cast<double>(n) * (1.0 - split)));
    STRATA_CHECK(kept > 0 && kept < n, InvalidArgument,
                 "from_image_folder: validation_split " << split << " of the " << n << " images in '" << directory
                                                        << "' leaves " << kept << " for training and " << n - kept
                                                        << " for validation: both need at least one");
    if (options.subset == "training") {
      chosen.resize(static_cast<size_t>(kept));
    } else {
      chosen.erase(chosen.begin(), chosen.begin() + kept);
    }
  }
  Tensor indices = Tensor::from_vector(chosen, {static_cast<int64_t>(chosen.size())});
  Dataset order = from_tensor_slices({indices});
  if (options.shuffle) order = order.shuffle(static_cast<int64_t>(chosen.size()), options.seed);
  const ColorMode mode = options.color_mode;
  const int64_t height = options.height, width = options.width;
  auto names = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"image", "label"});
  return order.map(
      [files, mode, height, width, names](const Element& e) {
        const auto i = static_cast<size_t>(e[0].data<int64_t>()[0]);
        Tensor image = resize_bilinear(read_image(files->paths[i], mode), height, width);
        Tensor label = Tensor::empty({}, DType::kInt64);
        *label.data<int64_t>() = files->labels[i];
        return Element({std::move(image), std::move(label)}, names);
      },
      {.num_parallel_calls = options.num_parallel_calls});
}

}  // namespace strata::data
