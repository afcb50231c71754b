// strata.data's native half: the C++ data::Dataset (sources: tensor slices over numpy arrays, IDX, TFRecord with or
// without tf.train.Example parsing, CSV; transformations: map over native ops, shuffle, batch, prefetch, take, skip,
// repeat, cache, shard, unbatch), its iterator handing out numpy arrays, and the TFRecord writer and Example
// serializer tests and users write files with. python/strata/data.py gives them tf.data's names and element
// structure (a bare array, a tuple or a dict). No Python code runs per element: map takes only native ops.
// Thread-safety: a Dataset is immutable (any thread); an Iterator is used by one thread at a time, and next() runs
// without the GIL (the pipeline's own threads never take it). The writer is used by one thread.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "arrays.h"
#include "bindings.h"
#include "strata/data/convert.h"
#include "strata/data/csv.h"
#include "strata/data/dataset.h"
#include "strata/data/example.h"
#include "strata/data/tfrecord.h"
#include "strata/data/tfrecord_dataset.h"
#include "strata/error.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace strata::python {
namespace {

// One iterator over a Dataset: next() is the element's components as numpy arrays over the element's tensors (no
// copy), or None at the end.
class PyIterator {
 public:
  explicit PyIterator(const data::Dataset& dataset) {
    nb::gil_scoped_release released;  // a prefetch or parallel map starts its threads here
    it_.emplace(dataset.make_iterator());
  }
  ~PyIterator() {
    nb::gil_scoped_release released;  // joins the pipeline's threads
    it_.reset();
  }

  // (components, names): names empty for a tuple.
  std::optional<std::pair<std::vector<nb::object>, std::vector<std::string>>> next() {
    std::optional<data::Element> element;
    {
      nb::gil_scoped_release released;
      element = it_->next();
    }
    if (!element) return std::nullopt;
    std::vector<nb::object> arrays;
    arrays.reserve(element->size());
    for (const Tensor& t : element->components()) arrays.push_back(numpy_from_tensor(t));
    return std::make_pair(std::move(arrays), element->names());
  }

 private:
  std::optional<data::Iterator> it_;
};

std::vector<size_t> indices_of(const std::vector<int64_t>& components) {
  std::vector<size_t> out;
  for (int64_t c : components) {
    STRATA_CHECK(c >= 0, InvalidArgument, "map: negative component index " << c);
    out.push_back(static_cast<size_t>(c));
  }
  return out;
}

// A column of CsvDataset's record_defaults: its type name and its default (None: required).
data::CsvColumn csv_column(const std::string& type, nb::handle default_value, size_t index) {
  const bool required = default_value.is_none();
  if (type == "float32") {
    return required ? data::CsvColumn::required(data::CsvType::kFloat32)
                    : data::CsvColumn::with_default(nb::cast<float>(default_value));
  }
  if (type == "int32") {
    return required ? data::CsvColumn::required(data::CsvType::kInt32)
                    : data::CsvColumn::with_default(nb::cast<int32_t>(default_value));
  }
  if (type == "int64") {
    return required ? data::CsvColumn::required(data::CsvType::kInt64)
                    : data::CsvColumn::with_default(nb::cast<int64_t>(default_value));
  }
  if (type == "string") {
    return required ? data::CsvColumn::required(data::CsvType::kString)
                    : data::CsvColumn::with_default(nb::cast<std::string>(default_value));
  }
  STRATA_THROW(InvalidArgument, "CsvDataset: record_defaults[" << index << "] has type '" << type
                                                               << "'; strata reads float32, int32, int64 or string");
}

}  // namespace

void define_data(nb::module_& parent) {
  nb::module_ m = parent.def_submodule("data", "strata::data bound for strata.data (use strata.data, not this).");
  m.attr("AUTOTUNE") = data::kAutotune;

  nb::class_<PyIterator>(m, "Iterator").def("next", &PyIterator::next);

  using data::Dataset;
  nb::class_<Dataset>(m, "Dataset")
      // ---- sources
      .def_static(
          "from_tensor_slices",
          [](const std::vector<nb::handle>& arrays, std::vector<std::string> names) {
            std::vector<Tensor> tensors;
            for (size_t i = 0; i < arrays.size(); ++i) {
              const std::string what = "from_tensor_slices component " + std::to_string(i);
              tensors.push_back(tensor_from_numpy(arrays[i], what.c_str()));
            }
            STRATA_CHECK(!tensors.empty(), InvalidArgument, "from_tensor_slices: no arrays given");
            for (size_t i = 1; i < tensors.size(); ++i) {
              STRATA_CHECK(tensors[i].dim(0) == tensors[0].dim(0), InvalidArgument,
                           "from_tensor_slices: every array must have the same first dimension, got "
                               << tensors[0].dim(0) << " for component 0 and " << tensors[i].dim(0)
                               << " for component " << i);
            }
            return Dataset::from_tensor_slices(std::move(tensors), std::move(names));
          },
          "arrays"_a, "names"_a = std::vector<std::string>{})
      .def_static("range", [](int64_t start, int64_t stop, int64_t step) { return Dataset::range(start, stop, step); },
                  "start"_a, "stop"_a, "step"_a = 1)
      .def_static(
          "from_idx",
          [](const std::string& directory, const std::string& split) {
            STRATA_CHECK(split == "train" || split == "test", InvalidArgument,
                         "from_idx: split is 'train' or 'test', got '" << split << "'");
            return Dataset::from_idx(directory, split == "train" ? data::Split::kTrain : data::Split::kTest);
          },
          "directory"_a, "split"_a = "train")
      .def_static(
          "tfrecord",
          [](std::vector<std::string> files, const std::string& compression, int64_t num_parallel_reads) {
            return data::TFRecordDataset(std::move(files), {.compression = data::parse_compression(compression),
                                                            .num_parallel_reads = num_parallel_reads});
          },
          "files"_a, "compression"_a = "", "num_parallel_reads"_a = 1)
      // TFRecord files of tf.train.Example parsed in the reading stage; each feature is (name, type, shape,
      // decode_raw dtype or "", var_len), as data::make_feature_spec takes them.
      .def_static(
          "tfrecord_examples",
          [](std::vector<std::string> files,
             const std::vector<std::tuple<std::string, std::string, std::vector<int64_t>, std::string, bool>>& features,
             const std::string& compression, int64_t num_parallel_reads) {
            STRATA_CHECK(!features.empty(), InvalidArgument, "parse_example: no features given");
            data::ExampleSpec spec;
            for (const auto& [name, type, shape, decode_raw, var_len] : features) {
              spec[name] = data::make_feature_spec(type, Shape(shape), decode_raw, var_len);
            }
            return data::make_example_dataset(std::move(files), std::move(spec),
                                              {.compression = data::parse_compression(compression),
                                               .num_parallel_reads = num_parallel_reads});
          },
          "files"_a, "features"_a, "compression"_a = "", "num_parallel_reads"_a = 1)
      .def_static(
          "csv",
          [](std::vector<std::string> files, const std::vector<std::pair<std::string, nb::object>>& defaults,
             bool header, const std::string& field_delim, bool use_quote_delim, std::string na_value,
             std::vector<int64_t> select_cols, std::vector<int64_t> exclude_cols, std::vector<std::string> names,
             const std::string& compression) {
            STRATA_CHECK(field_delim.size() == 1, InvalidArgument,
                         "CsvDataset: field_delim must be one character, got '" << field_delim << "'");
            std::vector<data::CsvColumn> columns;
            for (size_t i = 0; i < defaults.size(); ++i) {
              columns.push_back(csv_column(defaults[i].first, defaults[i].second, i));
            }
            data::CsvOptions options;
            options.header = header;
            options.field_delim = field_delim[0];
            options.use_quote_delim = use_quote_delim;
            options.na_value = std::move(na_value);
            options.select_cols = std::move(select_cols);
            options.exclude_cols = std::move(exclude_cols);
            options.column_names = std::move(names);
            options.compression = data::parse_compression(compression);
            return data::CsvDataset(std::move(files), std::move(columns), std::move(options));
          },
          "files"_a, "record_defaults"_a, "header"_a = false, "field_delim"_a = ",", "use_quote_delim"_a = true,
          "na_value"_a = "", "select_cols"_a = std::vector<int64_t>{}, "exclude_cols"_a = std::vector<int64_t>{},
          "names"_a = std::vector<std::string>{}, "compression"_a = "")
      // ---- native maps (no Python per element)
      // data::to_float(component, scale) on the components listed (all when empty).
      .def(
          "map_to_float",
          [](const Dataset& d, std::vector<int64_t> components, float scale, int64_t num_parallel_calls,
             bool deterministic) {
            const std::vector<size_t> which = indices_of(components);
            return d.map(
                [which, scale](const data::Element& e) {
                  data::Element out = e;
                  auto& parts = out.mutable_components();
                  if (which.empty()) {
                    for (Tensor& t : parts) t = data::to_float(t, scale);
                  } else {
                    for (size_t i : which) {
                      STRATA_CHECK(i < parts.size(), InvalidArgument,
                                   "to_float: component " << i << " of an element of " << parts.size());
                      parts[i] = data::to_float(parts[i], scale);
                    }
                  }
                  return out;
                },
                {.num_parallel_calls = num_parallel_calls, .deterministic = deterministic});
          },
          "components"_a, "scale"_a, "num_parallel_calls"_a = 1, "deterministic"_a = true)
      // The listed components, in that order, as a tuple (the names dropped): a dict's (x, y) for fit.
      .def(
          "map_select",
          [](const Dataset& d, std::vector<int64_t> components) {
            const std::vector<size_t> which = indices_of(components);
            STRATA_CHECK(!which.empty(), InvalidArgument, "select: no components given");
            return d.map([which](const data::Element& e) {
              std::vector<Tensor> parts;
              for (size_t i : which) parts.push_back(e[i]);
              return data::Element(std::move(parts));
            });
          },
          "components"_a)
      // ---- transformations
      .def(
          "shuffle",
          [](const Dataset& d, int64_t buffer_size, std::optional<uint64_t> seed, bool reshuffle) {
            STRATA_CHECK(buffer_size >= 1, InvalidArgument, "shuffle: buffer_size must be at least 1, got "
                                                                << buffer_size);
            return d.shuffle(buffer_size, seed, reshuffle);
          },
          "buffer_size"_a, "seed"_a.none() = nb::none(), "reshuffle_each_iteration"_a = true)
      .def(
          "batch",
          [](const Dataset& d, int64_t batch_size, bool drop_remainder) {
            STRATA_CHECK(batch_size >= 1, InvalidArgument, "batch: batch_size must be at least 1, got "
                                                               << batch_size);
            return d.batch(batch_size, drop_remainder);
          },
          "batch_size"_a, "drop_remainder"_a = false)
      .def("prefetch", &Dataset::prefetch, "buffer_size"_a = data::kAutotune)
      .def("take", &Dataset::take, "count"_a)
      .def("skip", &Dataset::skip, "count"_a)
      .def("repeat", &Dataset::repeat, "count"_a = -1)
      .def("cache", [](const Dataset& d, const std::string& path) { return path.empty() ? d.cache() : d.cache(path); },
           "filename"_a = "")
      .def("shard", &Dataset::shard, "num_shards"_a, "index"_a)
      .def("unbatch", &Dataset::unbatch)
      .def("cardinality", &Dataset::cardinality)
      .def("make_iterator", [](const Dataset& d) { return std::make_unique<PyIterator>(d); });

  // tf.io.TFRecordWriter: records (bytes) into a TFRecord file, optionally GZIP or ZLIB.
  nb::class_<data::TFRecordWriter>(m, "TFRecordWriter")
      .def(
          "__init__",
          [](data::TFRecordWriter* self, const std::string& path, const std::string& compression) {
            new (self) data::TFRecordWriter(path, data::parse_compression(compression));
          },
          "path"_a, "compression"_a = "")
      .def("write", [](data::TFRecordWriter& w, nb::bytes record) { w.write({record.c_str(), record.size()}); },
           "record"_a)
      .def("flush", &data::TFRecordWriter::flush)
      .def("close", &data::TFRecordWriter::close);

  // A serialized tf.train.Example from (name, kind, values): kind "bytes" (one bytes value), "float" or "int64".
  m.def(
      "serialize_example",
      [](const std::vector<std::tuple<std::string, std::string, nb::object>>& features) {
        data::Example example;
        for (const auto& [name, kind, values] : features) {
          if (kind == "bytes") {
            const auto value = nb::cast<nb::bytes>(values);
            example.set_bytes(name, std::string_view(value.c_str(), value.size()));
          } else if (kind == "float") {
            example.set_floats(name, nb::cast<std::vector<float>>(values));
          } else if (kind == "int64") {
            example.set_int64s(name, nb::cast<std::vector<int64_t>>(values));
          } else {
            STRATA_THROW(InvalidArgument, "serialize_example: feature '" << name << "' has kind '" << kind
                                                                         << "'; use bytes, float or int64");
          }
        }
        const std::string bytes = example.serialize();
        return nb::bytes(bytes.data(), bytes.size());
      },
      "features"_a);
}

}  // namespace strata::python
