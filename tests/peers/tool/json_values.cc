// See json_values.h.
#include "json_values.h"

#include <cstring>

#include "strata/error.h"

namespace strata::peers {

float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

std::vector<float> floats_from_bits(const json& bits) {
  std::vector<float> out;
  for (const json& b : bits) out.push_back(float_from_bits(b.get<uint32_t>()));
  return out;
}

json bits_of(const std::vector<float>& values) {
  json out = json::array();
  for (float v : values) out.push_back(bits_of(v));
  return out;
}

std::string bytes_from_hex(std::string_view hex) {
  STRATA_CHECK(hex.size() % 2 == 0, InvalidArgument, "hex string of odd length " << hex.size());
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    STRATA_THROW(InvalidArgument, "not a hex digit: '" << c << "'");
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  return out;
}

std::string hex_of(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

DType dtype_named(const std::string& name) {
  for (DType d : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kUInt8, DType::kBFloat16}) {
    if (name == dtype_name(d)) return d;
  }
  STRATA_THROW(InvalidArgument, "unknown dtype '" << name << "'");
}

Shape shape_of(const json& dims) {
  Shape shape;
  for (const json& d : dims) shape.push_back(d.get<int64_t>());
  return shape;
}

Tensor tensor_from_json(const json& spec) {
  const DType dtype = dtype_named(member(spec, "dtype").get<std::string>());
  const Shape shape = shape_of(member(spec, "shape"));
  const json& values = member(spec, "values");
  Tensor t = Tensor::empty(shape, dtype);
  STRATA_CHECK(static_cast<int64_t>(values.size()) == t.numel(), InvalidArgument,
               "tensor of " << t.numel() << " elements given " << values.size() << " values");
  for (int64_t i = 0; i < t.numel(); ++i) {
    const json& v = values[static_cast<size_t>(i)];
    switch (dtype) {
      case DType::kFloat32:
        t.data<float>()[i] = float_from_bits(v.get<uint32_t>());
        break;
      case DType::kInt32:
        t.data<int32_t>()[i] = v.get<int32_t>();
        break;
      case DType::kInt64:
        t.data<int64_t>()[i] = v.get<int64_t>();
        break;
      case DType::kUInt8:
        t.data<uint8_t>()[i] = v.get<uint8_t>();
        break;
      case DType::kBFloat16:
        static_cast<uint16_t*>(t.raw_data())[i] = v.get<uint16_t>();
        break;
    }
  }
  return t;
}

json tensor_to_json(const Tensor& tensor) {
  const Tensor t = tensor.to(Device::cpu());
  json values = json::array();
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat32:
        values.push_back(bits_of(t.data<float>()[i]));
        break;
      case DType::kInt32:
        values.push_back(t.data<int32_t>()[i]);
        break;
      case DType::kInt64:
        values.push_back(t.data<int64_t>()[i]);
        break;
      case DType::kUInt8:
        values.push_back(t.data<uint8_t>()[i]);
        break;
      case DType::kBFloat16:
        values.push_back(static_cast<const uint16_t*>(t.raw_data())[i]);
        break;
    }
  }
  return {{"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}, {"values", values}};
}

const json& member(const json& object, const char* key) {
  STRATA_CHECK(object.is_object() && object.contains(key), InvalidArgument, "the request lacks \"" << key << "\"");
  return object[key];
}

}  // namespace strata::peers
