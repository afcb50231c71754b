// Raw deflate (RFC 1951) decoding of several independent streams at once, on one thread.
//
// Why: a Huffman decoder waits on its own table lookups (each symbol's bits say where the next one
// starts), so one stream leaves most of a core idle: libdeflate takes about 2 ns a literal here.
// Two streams decoded in turn give the core two independent chains to overlap. The gzip files strata
// writes are chains of members that carry their own sizes (see compression.h), so a reader knows where
// each member's deflate body starts and how many bytes it inflates to before decoding any of them,
// and can hand them here in pairs.
//
// This decoder only says whether every stream was valid: on false, the caller inflates again with a
// validating decoder (libdeflate or zlib) for the error and its offset. Every read stays inside each
// job's input and every write inside its output, whatever the input holds.
// Thread-safety: stateless apart from the fixed-code tables, built once on first use (thread-safe).
#pragma once

#include <cstddef>
#include <span>

namespace strata::data::detail {

// One raw deflate stream and where it inflates to.
struct InflateJob {
  const unsigned char* in = nullptr;  // exactly one raw deflate stream: in[0, in_size)
  size_t in_size = 0;
  unsigned char* out = nullptr;  // receives exactly out_size bytes (the member's ISIZE)
  size_t out_size = 0;
};

// Decodes every job, two at a time. True when each input is one valid deflate stream whose final
// block ends in its last byte and which inflates to exactly out_size bytes; false otherwise (the
// outputs then hold unspecified bytes). Outputs must not overlap one another or the inputs.
bool inflate_streams(std::span<const InflateJob> jobs);

}  // namespace strata::data::detail
