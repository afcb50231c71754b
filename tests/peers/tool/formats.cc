// peers_tool's file subcommands: strata writes and reads TFRecord files of tf.train.Examples, TensorBoard event files
// and safetensors files through the library's own writers and readers, as a program would. See commands.h.
// Thread-safety: see commands.h.
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "io/event_writer.h"
#include "strata/data/example.h"
#include "strata/data/tfrecord.h"
#include "strata/data/tfrecord_dataset.h"
#include "strata/error.h"
#include "strata/io/safetensors.h"

namespace strata::peers {

namespace {

// {"bytes_hex": [...]} | {"float_bits": [...]} | {"int64": [...]} -> a Feature.
data::Feature feature_from_json(const json& f) {
  if (f.contains("bytes_hex")) {
    std::vector<std::string> values;
    for (const json& h : f["bytes_hex"]) values.push_back(bytes_from_hex(h.get<std::string>()));
    return data::Feature::of_bytes(std::move(values));
  }
  if (f.contains("float_bits")) return data::Feature::of_floats(floats_from_bits(f["float_bits"]));
  if (f.contains("int64")) return data::Feature::of_int64s(f["int64"].get<std::vector<int64_t>>());
  STRATA_THROW(InvalidArgument, "a feature needs bytes_hex, float_bits or int64, got " << f.dump());
}

json feature_to_json(const data::Feature& f) {
  switch (f.type) {
    case data::FeatureType::kBytes: {
      json values = json::array();
      for (const std::string& b : f.bytes) values.push_back(hex_of(b));
      return {{"bytes_hex", values}};
    }
    case data::FeatureType::kFloat:
      return {{"float_bits", bits_of(f.floats)}};
    case data::FeatureType::kInt64:
      return {{"int64", f.int64s}};
  }
  return nullptr;
}

data::Compression compression_of(const json& request) {
  return data::parse_compression(request.value("compression", std::string("none")));
}

// {name: {"type", "shape", "decode_raw", "var_len", "default"}} -> the ExampleSpec make_example_dataset takes.
data::ExampleSpec example_spec_from_json(const json& spec) {
  data::ExampleSpec out;
  for (const auto& [name, f] : spec.items()) {
    data::FeatureSpec s =
        data::make_feature_spec(member(f, "type").get<std::string>(), shape_of(f.value("shape", json::array())),
                                f.value("decode_raw", std::string()), f.value("var_len", false));
    if (f.contains("default")) s.default_value = feature_from_json(f["default"]);
    out.emplace(name, std::move(s));
  }
  return out;
}

}  // namespace

json tfrecord_write(const json& request) {
  data::TFRecordWriter writer(member(request, "path").get<std::string>(), compression_of(request));
  json serialized = json::array();
  for (const json& record : member(request, "records")) {
    std::string bytes;
    if (record.contains("raw_hex")) {
      bytes = bytes_from_hex(record["raw_hex"].get<std::string>());
    } else {
      data::Example example;
      for (const auto& [name, f] : member(record, "example").items()) example.set(name, feature_from_json(f));
      bytes = example.serialize();
    }
    writer.write(bytes);
    serialized.push_back(hex_of(bytes));
  }
  writer.close();
  return {{"records_written", writer.records_written()}, {"records_hex", serialized}};
}

json tfrecord_read(const json& request) {
  const std::string path = member(request, "path").get<std::string>();
  const data::TFRecordDatasetOptions options{.compression = compression_of(request)};
  // Every record through tf.data's TFRecordDataset, and each parsed as a whole Example where it is one.
  json records = json::array(), examples = json::array();
  data::Iterator it = data::TFRecordDataset({path}, options).make_iterator();
  while (auto element = it.next()) {
    const std::string bytes = data::tensor_string((*element)[0]);
    records.push_back(hex_of(bytes));
    json features = json::object();
    try {
      const data::Example example = data::Example::parse(bytes, path);
      for (const auto& [name, f] : example.features()) features[name] = feature_to_json(f);
    } catch (const DataCorrupt&) {
      features = nullptr;  // not an Example (a test's raw record)
    }
    examples.push_back(features);
  }
  json answer = {{"records_hex", records}, {"examples", examples}};
  // The features of `spec` through make_example_dataset, the parser the training input uses.
  if (request.contains("spec")) {
    json parsed = json::array();
    data::Iterator features =
        data::make_example_dataset({path}, example_spec_from_json(request["spec"]), options).make_iterator();
    while (auto element = features.next()) {
      json one = json::object();
      for (size_t k = 0; k < element->size(); ++k) one[element->names()[k]] = tensor_to_json((*element)[k]);
      parsed.push_back(one);
    }
    answer["parsed"] = parsed;
  }
  return answer;
}

json events_write(const json& request) {
  io::detail::EventFileWriter writer(member(request, "dir").get<std::string>());
  for (const json& event : member(request, "events")) {
    std::vector<std::pair<std::string, float>> scalars;
    for (const json& s : member(event, "scalars")) {
      scalars.emplace_back(s.at(0).get<std::string>(), float_from_bits(s.at(1).get<uint32_t>()));
    }
    writer.add_scalars(member(event, "step").get<int64_t>(), scalars);
  }
  writer.close();
  return {{"path", writer.path()}};
}

json safetensors_write(const json& request) {
  io::NamedTensors tensors;
  for (const json& t : member(request, "tensors")) {
    tensors.emplace_back(member(t, "name").get<std::string>(), tensor_from_json(t));
  }
  const auto metadata = request.value("metadata", std::map<std::string, std::string>{});
  io::save_safetensors(member(request, "path").get<std::string>(), tensors, metadata);
  return {{"tensors_written", tensors.size()}};
}

json safetensors_read(const json& request) {
  std::map<std::string, std::string> metadata;
  const io::NamedTensors tensors = io::load_safetensors(member(request, "path").get<std::string>(), &metadata);
  json out = json::array();
  for (const auto& [name, t] : tensors) {
    json one = tensor_to_json(t);
    one["name"] = name;
    out.push_back(one);
  }
  return {{"tensors", out}, {"metadata", metadata}};
}

}  // namespace strata::peers
