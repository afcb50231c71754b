// Weights as safetensors files, the format other tools (PyTorch, JAX, Hugging Face) read:
//
//   8 bytes   N, the header length (unsigned 64-bit, little-endian)
//   N bytes   a JSON object {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//             ..., "__metadata__": {"<key>": "<value>"}}, padded with spaces so 8 + N is a multiple of 8
//   the rest  the tensors' raw little-endian bytes, row-major, one after another in the order given,
//             with no gaps; `data_offsets` are relative to the start of this buffer.
//
// dtype codes: F32, I32, I64, U8, BF16 (the DTypes strata holds). Tensor names are the layers'
// variable names ("dense/kernel"), kept in the order the caller gave them.
//
// Checksums. safetensors has none, so strata keeps one per tensor in "__metadata__", where other
// readers (PyTorch's safetensors, tests/io/read_safetensors.py) see only more strings:
//   "crc32c:<tensor name>": "<8 lowercase hex digits>"
// the CRC-32C (Castagnoli, as iSCSI and TFRecord use it, unmasked; "123456789" -> e3069283) of the
// tensor's data bytes [begin, end). `save_safetensors` writes one for every tensor (after the caller's
// metadata, in the tensors' order) and reserves keys starting "crc32c:". `load_safetensors` checks
// every tensor that has one and raises DataCorrupt "<path>: tensor '<name>' is damaged: its data
// (bytes [b, e) after the header) has CRC-32C <actual> but the file records <recorded>"; a checksum
// naming no tensor of the file, or not 8 hex digits, is DataCorrupt too. Tensors without one (files
// from other writers) load unchecked. The checksums are not returned with the metadata.
//
// Writes are atomic: the bytes go to "<path>.tmp-<pid>-<n>" in the same directory, which is fsync'ed
// and renamed over `path`, so a crash leaves either the old file or the new one, never half of one.
// Loads check every header field against the file and raise DataCorrupt naming the file and the
// problem; a file that cannot be opened or read raises IoError.
//
// Thread-safety: the functions share no state; concurrent saves to the same path are safe (each
// writes its own temporary file; the last rename wins).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "strata/tensor.h"

namespace strata::io {

// Tensors by name; the order is kept through save and load.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (any device; copied to the host) and the string `metadata` to `path` atomically.
// Adds a "crc32c:<name>" checksum per tensor to the metadata. Throws InvalidArgument for an undefined
// tensor, an empty, duplicate or reserved ("__metadata__") name, a name that is not valid UTF-8, or a
// metadata key starting "crc32c:"; IoError when the file cannot be written (the old file at
// `path`, if any, is left as it was and no temporary file remains).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of a safetensors file into host tensors, in the order of their data in the file,
// verifying each recorded checksum (above). Fills `*metadata` (when given) with the header's
// "__metadata__" strings other than the checksums. Throws DataCorrupt naming the file (and the tensor)
// for a malformed or damaged file, IoError when it cannot be opened or read.
NamedTensors load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

// Throws InvalidArgument naming `what` (e.g. the file) and the first difference: a name missing from
// `loaded`, an unexpected name, or a name whose shape or dtype differs (both shown). Order is ignored.
void check_matches(const NamedTensors& expected, const NamedTensors& loaded, const std::string& what);

// load_safetensors + check_matches(expected, loaded, path).
NamedTensors load_safetensors_matching(const std::string& path, const NamedTensors& expected,
                                       std::map<std::string, std::string>* metadata = nullptr);

// "F32", "I32", "I64", "U8", "BF16".
const char* safetensors_dtype_code(DType dtype);

}  // namespace strata::io
