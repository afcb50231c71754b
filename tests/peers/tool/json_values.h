// How peers_tool's requests and answers carry values in JSON (tests/peers/peers_tool.py decodes the same way):
// float32 as its IEEE-754 bits (a uint32), bfloat16 as its 16 bits, so that NaN, the infinities and -0 survive JSON
// and every comparison can be exact; integers as JSON numbers; bytes as lowercase hex strings; a tensor as
// {"dtype": "float32", "shape": [2, 3], "values": [...]} with its values in row-major order.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "strata/tensor.h"

namespace strata::peers {

using nlohmann::json;

float float_from_bits(uint32_t bits);
uint32_t bits_of(float value);
std::vector<float> floats_from_bits(const json& bits);
json bits_of(const std::vector<float>& values);

std::string bytes_from_hex(std::string_view hex);  // InvalidArgument for an odd length or a non-hex digit
std::string hex_of(std::string_view bytes);

// "float32", "int32", "int64", "uint8", "bfloat16" -> DType; InvalidArgument otherwise.
DType dtype_named(const std::string& name);
Shape shape_of(const json& dims);

// {"dtype", "shape", "values"} <-> a host tensor (bit patterns for float32 and bfloat16).
Tensor tensor_from_json(const json& spec);
json tensor_to_json(const Tensor& tensor);

// The member `key` of `object`, or InvalidArgument naming it when it is missing.
const json& member(const json& object, const char* key);

}  // namespace strata::peers
