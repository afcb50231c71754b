// CRC-32C (Castagnoli), the checksum of TFRecord files (io/crc32c.h: ISA-L's crc32_iscsi), and TensorFlow's
// "masked" form of it, under data's names: both live in io (io/tfrecord_framing.h frames records for data's TFRecord
// files and io's TensorBoard event files alike).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "io/crc32c.h"
#include "io/tfrecord_framing.h"

namespace strata::data::detail {

using io::detail::crc32c;
using io::detail::crc32c_extend;
using io::detail::mask_crc;
using io::detail::unmask_crc;

}  // namespace strata::data::detail
