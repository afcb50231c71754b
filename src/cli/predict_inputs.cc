// The readers behind `strata predict`'s INPUT (see predict_inputs.h). TFRecord goes through the library's
// TFRecordReader and ExampleParser, CSV through its CsvReader; only the header of a CSV file is looked at here, to
// tell it from a row of numbers and to find a "label" column.
//
// Thread-safety: free functions with no shared state.
#include "cli/predict_inputs.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "strata/data/csv.h"
#include "strata/data/example.h"
#include "strata/data/idx.h"
#include "strata/data/tfrecord.h"
#include "strata/error.h"
#include "strata/io/npy.h"

namespace strata::cli {

namespace {

// The file's name without a compression suffix (.gz, .zz, .zlib).
std::string name_without_compression(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (const char* suffix : {".gz", ".zz", ".zlib"}) {
    if (name.size() > std::strlen(suffix) && name.ends_with(suffix)) {
      name.resize(name.size() - std::strlen(suffix));
      break;
    }
  }
  return name;
}

bool is_idx_name(const std::string& name) { return name.ends_with("-ubyte") || name.ends_with(".idx"); }

bool is_tfrecord_name(const std::string& name) {
  return name.ends_with(".tfrecord") || name.ends_with(".tfrecords") || name.ends_with(".tfrec");
}

// ---- TFRecord ----

// How feature `f` of an Example holds one example of `want` values, or nullopt when it cannot.
std::optional<data::FeatureSpec> spec_for(const data::Feature& f, const Shape& shape) {
  const auto want = static_cast<size_t>(shape_numel(shape));
  switch (f.type) {
    case data::FeatureType::kBytes:
      if (f.bytes.size() != 1) return std::nullopt;
      if (f.bytes[0].size() == want) return data::RawBytesFeature(DType::kUInt8, shape);
      if (f.bytes[0].size() == want * sizeof(float)) return data::RawBytesFeature(DType::kFloat32, shape);
      return std::nullopt;
    case data::FeatureType::kFloat:
      if (f.floats.size() == want) return data::FixedLenFeature(data::FeatureType::kFloat, shape);
      return std::nullopt;
    case data::FeatureType::kInt64:
      if (f.int64s.size() == want) return data::FixedLenFeature(data::FeatureType::kInt64, shape);
      return std::nullopt;
  }
  return std::nullopt;
}

std::string describe_feature(const std::string& name, const data::Feature& f) {
  std::ostringstream s;
  s << name << " (" << data::feature_type_name(f.type) << ", " << f.size() << (f.size() == 1 ? " value" : " values");
  if (f.type == data::FeatureType::kBytes && f.bytes.size() == 1) s << " of " << f.bytes[0].size() << " bytes";
  s << ")";
  return s.str();
}

// The feature holding the input, chosen from the first record: `x_feature` when named, else the one that fits.
std::pair<std::string, data::FeatureSpec> choose_feature(const data::Example& first, const std::string& path,
                                                         const SavedModelInfo& model, const std::string& x_feature) {
  const std::string wanted = "one example of the model's input " + shape_str(model.input_shape) + " (" +
                             std::to_string(shape_numel(model.input_shape)) + " values)";
  std::string all;
  for (const auto& [name, feature] : first.features()) all += (all.empty() ? "" : ", ") + describe_feature(name, feature);
  if (!x_feature.empty()) {
    const data::Feature* f = first.find(x_feature);
    STRATA_CHECK(f != nullptr, InvalidArgument,
                 "input '" << path << "': its first Example has no feature '" << x_feature << "'; it has " << all);
    std::optional<data::FeatureSpec> spec = spec_for(*f, model.input_shape);
    STRATA_CHECK(spec.has_value(), ShapeError,
                 "input '" << path << "': feature " << describe_feature(x_feature, *f) << " does not hold " << wanted);
    return {x_feature, *spec};
  }
  std::vector<std::pair<std::string, data::FeatureSpec>> fitting;
  for (const auto& [name, feature] : first.features()) {
    if (std::optional<data::FeatureSpec> spec = spec_for(feature, model.input_shape)) fitting.emplace_back(name, *spec);
  }
  STRATA_CHECK(!fitting.empty(), ShapeError,
               "input '" << path << "': no feature of its first Example holds " << wanted << "; it has "
                         << (all.empty() ? "no features" : all));
  if (fitting.size() > 1) {
    std::string names;
    for (const auto& candidate : fitting) names += (names.empty() ? "" : ", ") + candidate.first;
    STRATA_THROW(InvalidArgument, "input '" << path << "': several features could be the input (" << names
                                            << "): name one with --x");
  }
  return fitting.front();
}

Tensor read_tfrecord(const std::string& path, const SavedModelInfo& model, const std::string& x_feature) {
  data::TFRecordReader reader(path, {.compression = data::detect_compression(path)});
  std::vector<std::string> records;
  for (std::string record; reader.read(&record);) records.push_back(std::move(record));
  STRATA_CHECK(!records.empty(), InvalidArgument, "input '" << path << "' holds no records");
  const data::Example first = data::Example::parse(records.front(), path + " record 0");
  auto [name, spec] = choose_feature(first, path, model, x_feature);
  const data::ExampleParser parser({{name, spec}});
  Shape shape = model.input_shape;
  shape.insert(shape.begin(), static_cast<int64_t>(records.size()));
  Tensor out = Tensor::empty(shape, parser.output_dtype(0));
  const size_t bytes_per_example = out.nbytes() / records.size();
  auto* base = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < records.size(); ++i) {
    void* dst[] = {base + i * bytes_per_example};
    parser.parse_into(records[i], {.file = path, .index = static_cast<int64_t>(i)}, dst);
  }
  return out;
}

// ---- CSV ----

std::string trimmed(std::string field) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  field.erase(field.begin(), std::find_if_not(field.begin(), field.end(), space));
  field.erase(std::find_if_not(field.rbegin(), field.rend(), space).base(), field.end());
  if (field.size() >= 2 && field.front() == '"' && field.back() == '"') field = field.substr(1, field.size() - 2);
  return field;
}

bool is_number(const std::string& field) {
  if (field.empty()) return false;
  char* end = nullptr;
  std::strtod(field.c_str(), &end);
  return end == field.c_str() + field.size();
}

Tensor read_csv(const std::string& path, const SavedModelInfo& model) {
  std::ifstream in(path);
  std::string line;
  STRATA_CHECK(in && std::getline(in, line), InvalidArgument, "input '" << path << "' holds no rows");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::vector<std::string> fields;
  for (std::istringstream row(line); std::getline(row, line, ',');) fields.push_back(trimmed(line));
  const bool header = !std::all_of(fields.begin(), fields.end(), is_number);
  std::vector<int64_t> label_column;
  if (header) {
    for (size_t k = 0; k < fields.size(); ++k) {
      std::string name = fields[k];
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      if (name == "label") label_column.push_back(static_cast<int64_t>(k));
    }
  }
  const int64_t want = shape_numel(model.input_shape);
  const int64_t columns = static_cast<int64_t>(fields.size()) - static_cast<int64_t>(label_column.size());
  STRATA_CHECK(columns == want, ShapeError,
               "input '" << path << "' has " << columns << " columns per row"
                         << (label_column.empty() ? "" : " besides its 'label' column") << ", but the model takes "
                         << want << " values per example (shape " << shape_str(model.input_shape) << ")"
                         << (!header && columns == want + 1
                                 ? "; if one column is the label, give the file a header naming it 'label'"
                                 : ""));
  const bool ids = model.input_dtype == DType::kInt64;
  const std::vector<data::CsvColumn> specs(
      static_cast<size_t>(want), data::CsvColumn::required(ids ? data::CsvType::kInt64 : data::CsvType::kFloat32));
  data::CsvReader reader(path, specs, {.header = header, .exclude_cols = label_column});
  std::vector<float> floats;
  std::vector<int64_t> int64s;
  int64_t rows = 0;
  for (std::vector<Tensor> row; reader.next(&row); ++rows) {
    for (const Tensor& value : row) {
      if (ids) {
        int64s.push_back(value.data<int64_t>()[0]);
      } else {
        floats.push_back(value.data<float>()[0]);
      }
    }
  }
  STRATA_CHECK(rows > 0, InvalidArgument, "input '" << path << "' holds no rows" << (header ? " below its header" : ""));
  Shape shape = model.input_shape;
  shape.insert(shape.begin(), rows);
  return ids ? Tensor::from_vector(int64s, shape) : Tensor::from_vector(floats, shape);
}

}  // namespace

Tensor read_predict_input(const std::string& path, const SavedModelInfo& model, const std::string& x_feature) {
  const std::string name = name_without_compression(path);
  const bool tfrecord = is_tfrecord_name(name);
  STRATA_CHECK(x_feature.empty() || tfrecord, InvalidArgument,
               "--x " << x_feature << ": names a TFRecord Example's feature; '" << path << "' is not a TFRecord file");
  if (tfrecord) return read_tfrecord(path, model, x_feature);
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension == ".npy") return io::read_npy(path);
  if (extension == ".csv") return read_csv(path, model);
  STRATA_CHECK(is_idx_name(name), InvalidArgument,
               "input '" << path << "': unknown format; supported: .npy, .csv, TFRecord of tf.train.Example "
                                    "(.tfrecord[.gz], .tfrecords, .tfrec) and IDX (a name ending -ubyte, -ubyte.gz or "
                                    ".idx, as Fashion-MNIST's t10k-images-idx3-ubyte)");
  return data::read_idx(path);
}

}  // namespace strata::cli
