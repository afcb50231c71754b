// The nesting depth of JSON text, measured before it is parsed. nlohmann::json parses any depth, but printing a value
// (dump(), which error messages use) and comparing values recurse once per level, so untrusted JSON (a TF_CONFIG, a
// safetensors header, a checkpoint manifest) is refused above kMaxJsonDepth levels instead of overflowing the stack.
// Thread-safety: pure functions.
#pragma once

#include <string_view>

namespace strata::detail {

// Far deeper than any file strata reads needs (a safetensors header nests 3 levels, TF_CONFIG 3).
inline constexpr int kMaxJsonDepth = 100;

// The deepest nesting of arrays and objects in `text`; brackets inside strings do not count. Text that is not valid
// JSON gets some depth; the parser says what is wrong with it.
inline int json_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace strata::detail
