// Interleaved raw deflate decoding (see inflate_streams.h). Thread-safety: the fixed-code tables are a
// function-local static (built once, then read-only); everything else lives on the caller's stack.
//
// Decode tables: one 32-bit entry per index of `root` bits (11 for literal/length codes, 8 for
// distances, 7 for the code-length code), read with the next bits of the stream (deflate sends codes
// most significant bit first, so tables are indexed by the bit-reversed code). Codes longer than the
// root point to a subtable. Entry layout:
//   bits 0-5   bits to consume: the code's length plus the extra bits after it (lengths, distances),
//              or `root` for a subtable pointer; a shift by the whole entry shifts by this much
//   bits 8-10  kind: a value (literal, distance or code length), length, end of block, subtable, invalid
//   bits 11-14 the code's own length (the extra bits follow it), or a subtable's index bits
//   bits 16-31 value: the literal byte, the length or distance base, or the subtable's offset
#include "data/inflate_streams.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

namespace strata::data::detail {

namespace {

constexpr uint32_t kValue = 0 << 8;  // a literal, a distance or a code length
constexpr uint32_t kLength = 1 << 8;
constexpr uint32_t kEndOfBlock = 2 << 8;
constexpr uint32_t kSubtable = 3 << 8;
constexpr uint32_t kInvalid = 4 << 8;
constexpr uint32_t kKindMask = 7 << 8;

constexpr int kLitlenRoot = 11, kDistRoot = 8, kPrecodeRoot = 7;
constexpr uint32_t kLitlenMask = (1u << kLitlenRoot) - 1, kDistMask = (1u << kDistRoot) - 1;
// The most entries a complete code can need with these roots (main table plus subtables), as for
// zlib's and libdeflate's tables: 288 symbols / root 11 / 15 bits, and 32 symbols / root 8 / 15 bits.
constexpr size_t kLitlenEnough = 2342, kDistEnough = 402, kPrecodeEnough = 128;

// An entry before its code's length is known: `extra` bits follow the code.
constexpr uint32_t entry(uint32_t kind, uint32_t value, uint32_t extra = 0) { return kind | extra | (value << 16); }
// The entry for a code of `length` bits (added to the extra bits already in the low field).
constexpr uint32_t with_code_length(uint32_t e, uint32_t length) { return (e + length) | (length << 11); }
constexpr uint32_t consumed(uint32_t e) { return e & 63; }
constexpr uint32_t code_length(uint32_t e) { return (e >> 11) & 15; }
constexpr uint32_t value(uint32_t e) { return e >> 16; }
// The extra bits of entry `e` from `saved`, the bit buffer as it was when `e` was looked up.
inline uint32_t extra_value(uint64_t saved, uint32_t e) {
  return static_cast<uint32_t>((saved & ((uint64_t{1} << consumed(e)) - 1)) >> code_length(e));
}

// RFC 1951 3.2.5: the base and extra bits of length symbols 257..285 and distance symbols 0..29.
constexpr uint16_t kLengthBase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr uint8_t kLengthExtra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr uint16_t kDistBase[30] = {1,    2,    3,    4,    5,    7,     9,     13,    17,  25,
                                    33,   49,   65,   97,   129,  193,   257,   385,   513, 769,
                                    1025, 1537, 2049, 3073, 4097, 6145,  8193,  12289, 16385, 24577};
constexpr uint8_t kDistExtra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3,  3,  4,  4,  5,  5,  6,
                                    6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
// The order in which a dynamic block's header sends the code-length code's lengths.
constexpr uint8_t kPrecodeOrder[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};

uint32_t litlen_entry(unsigned symbol) {
  if (symbol < 256) return entry(kValue, symbol);
  if (symbol == 256) return entry(kEndOfBlock, 0);
  if (symbol < 286) return entry(kLength, kLengthBase[symbol - 257], kLengthExtra[symbol - 257]);
  return kInvalid;  // 286 and 287 take part in the fixed code but never occur
}
uint32_t dist_entry(unsigned symbol) {
  return symbol < 30 ? entry(kValue, kDistBase[symbol], kDistExtra[symbol]) : kInvalid;
}
uint32_t precode_entry(unsigned symbol) { return entry(kValue, symbol); }

// The `length` low bits of `code`, most significant first (deflate's order on the wire).
uint32_t reverse_bits(uint32_t code, unsigned length) {
  static constexpr auto kReversedBytes = [] {
    std::array<uint8_t, 256> r{};
    for (unsigned b = 0; b < 256; ++b)
      for (unsigned i = 0; i < 8; ++i) r[b] |= static_cast<uint8_t>(((b >> i) & 1) << (7 - i));
    return r;
  }();
  return ((uint32_t{kReversedBytes[code & 255]} << 8) | kReversedBytes[(code >> 8) & 255]) >> (16 - length);
}

// Fills `table` (room for `capacity` entries) from the code lengths of symbols 0..n-1. False for an
// over-subscribed set, or an incomplete one other than a single code of length 1 (or, where
// `allow_empty`, no code at all): what zlib accepts.
template <class EntryOf>
bool build_table(const uint8_t* lengths, unsigned n, unsigned root, uint32_t* table, size_t capacity,
                 bool allow_empty, EntryOf entry_of) {
  unsigned count[16] = {};
  for (unsigned s = 0; s < n; ++s) ++count[lengths[s]];
  count[0] = 0;
  int left = 1;
  unsigned codes = 0;
  for (unsigned len = 1; len <= 15; ++len) {
    left = (left << 1) - static_cast<int>(count[len]);
    if (left < 0) return false;
    codes += count[len];
  }
  if (left > 0 && !(codes == 1 && count[1] == 1) && !(codes == 0 && allow_empty)) return false;
  unsigned offset[16];
  offset[1] = 0;
  for (unsigned len = 1; len < 15; ++len) offset[len + 1] = offset[len] + count[len];
  uint16_t sorted[288];
  for (unsigned s = 0; s < n; ++s)
    if (lengths[s]) sorted[offset[lengths[s]]++] = static_cast<uint16_t>(s);

  const size_t root_size = size_t{1} << root;
  if (left > 0) std::fill(table, table + root_size, kInvalid);  // (a complete code fills every entry)
  unsigned remaining[16];
  std::copy(count, count + 16, remaining);
  size_t next_sub = root_size, sub_base = 0;
  uint32_t prefix = UINT32_MAX;
  unsigned sub_bits = 0, code = 0, k = 0;
  for (unsigned len = 1; len <= 15; ++len, code <<= 1) {
    for (unsigned c = 0; c < count[len]; ++c, ++code) {
      const uint32_t e = entry_of(sorted[k++]);
      const uint32_t rev = reverse_bits(code, len);
      if (len <= root) {
        const uint32_t full = with_code_length(e, len);
        for (size_t i = rev; i < root_size; i += size_t{1} << len) table[i] = full;
      } else {
        const uint32_t p = rev & static_cast<uint32_t>(root_size - 1);
        if (p != prefix) {
          // A new subtable, as wide as the codes under this prefix need: widen while the codes of the
          // current width cannot fill it (they come first in canonical order).
          sub_bits = len - root;
          int space = 1 << sub_bits;
          while (sub_bits + root < 15) {
            space -= static_cast<int>(remaining[sub_bits + root]);
            if (space <= 0) break;
            ++sub_bits;
            space <<= 1;
          }
          if (next_sub + (size_t{1} << sub_bits) > capacity) return false;
          sub_base = next_sub;
          next_sub += size_t{1} << sub_bits;
          std::fill(table + sub_base, table + next_sub, kInvalid);
          table[p] = kSubtable | root | (sub_bits << 11) | static_cast<uint32_t>(sub_base << 16);
          prefix = p;
        }
        if (len - root > sub_bits) return false;
        const uint32_t full = with_code_length(e, len - root);
        for (size_t i = rev >> root; i < (size_t{1} << sub_bits); i += size_t{1} << (len - root))
          table[sub_base + i] = full;
      }
      --remaining[len];
    }
  }
  return true;
}

struct FixedTables {
  uint32_t litlen[kLitlenEnough];
  uint32_t dist[kDistEnough];
  FixedTables() {
    uint8_t lengths[288];
    std::fill(lengths, lengths + 144, 8);
    std::fill(lengths + 144, lengths + 256, 9);
    std::fill(lengths + 256, lengths + 280, 7);
    std::fill(lengths + 280, lengths + 288, 8);
    build_table(lengths, 288, kLitlenRoot, litlen, kLitlenEnough, false, litlen_entry);
    std::fill(lengths, lengths + 32, 5);
    build_table(lengths, 32, kDistRoot, dist, kDistEnough, false, dist_entry);
  }
};
const FixedTables& fixed_tables() {
  static const FixedTables tables;
  return tables;
}

// Output margin the fast path keeps: two literals and a longest match, plus the overshoot of the
// match's 16-byte copies.
constexpr size_t kFastOutMargin = 2 + 258 + 32;
// Input margin the fast path keeps: its two 8-byte refills per step stay inside the input.
constexpr size_t kFastInMargin = 16;
// Zero bytes a stream may read past its end (refills look ahead); more means it is broken.
constexpr unsigned kMaxOverrun = 16;

// Tops `buf` up to 56..63 valid bits from 8 bytes at p. The bits past n already in buf are the same
// stream bits, so OR-ing them again changes nothing. REQUIRES: 8 readable bytes at p.
inline void refill_fast(const unsigned char*& p, uint64_t& buf, unsigned& n) {
  uint64_t w;
  std::memcpy(&w, p, 8);  // little-endian hosts, as the rest of the reader
  buf |= w << n;
  p += 7 - ((n >> 3) & 7);
  n |= 56;
}

// Looks up the entry for the next bits of buf in `table`, following a subtable pointer, and consumes
// its bits (code and extra bits); `saved` gets buf as it was before them, for extra_value().
inline uint32_t lookup(const uint32_t* table, unsigned root, uint64_t& buf, unsigned& n, uint64_t& saved) {
  uint32_t e = table[buf & ((uint32_t{1} << root) - 1)];
  if ((e & kKindMask) == kSubtable) [[unlikely]] {
    buf >>= root;
    n -= root;
    e = table[value(e) + (buf & ((uint32_t{1} << code_length(e)) - 1))];
  }
  saved = buf;
  buf >>= consumed(e);
  n -= consumed(e);
  return e;
}

enum class State : uint8_t { kHeader, kBlock, kDone, kFailed };

// How many streams are decoded at once. (Three or four, written as one loop over an array of Regs,
// were slower here: the compiler keeps the array in memory.)
constexpr int kStreams = 2;

// One stream's decoder. The fast loop copies the hot fields into registers (Regs).
struct Stream {
  const unsigned char* p = nullptr;  // next input byte
  const unsigned char* start = nullptr;
  const unsigned char* end = nullptr;
  uint64_t buf = 0;  // bits not yet consumed, the next one lowest
  unsigned n = 0;    // how many bits of buf are valid
  unsigned overrun = 0;
  unsigned char* out = nullptr;
  unsigned char* out_begin = nullptr;
  unsigned char* out_end = nullptr;
  const uint32_t* litlen = nullptr;
  const uint32_t* dist = nullptr;
  State state = State::kHeader;
  bool final_block = false;
  uint32_t own_litlen[kLitlenEnough];
  uint32_t own_dist[kDistEnough];

  void start_job(const InflateJob& job) {
    p = start = job.in;
    end = job.in + job.in_size;
    buf = 0;
    n = 0;
    overrun = 0;
    out = out_begin = job.out;
    out_end = job.out + job.out_size;
    state = State::kHeader;
    final_block = false;
  }
  bool fast_ready() const {
    return state == State::kBlock && static_cast<size_t>(end - p) >= kFastInMargin &&
           static_cast<size_t>(out_end - out) >= kFastOutMargin;
  }
  // Tops buf up to at least 56 bits; near the end byte by byte, and past it with zeros (counted).
  void refill() {
    if (static_cast<size_t>(end - p) >= 8) {
      refill_fast(p, buf, n);
      return;
    }
    while (n <= 56) {
      uint64_t byte = 0;
      if (p < end)
        byte = *p++;
      else
        ++overrun;
      buf |= byte << n;
      n += 8;
    }
  }
  uint32_t bits(unsigned count) {  // REQUIRES: count <= 32, refilled
    const uint32_t v = static_cast<uint32_t>(buf & ((uint64_t{1} << count) - 1));
    buf >>= count;
    n -= count;
    return v;
  }
  bool fail() {
    state = State::kFailed;
    return false;
  }
  bool read_header();
  bool read_stored();
  bool read_dynamic();
  bool slow_symbol();
  bool finish();
};

bool Stream::read_header() {
  refill();
  if (overrun > kMaxOverrun) return fail();
  final_block = bits(1);
  switch (bits(2)) {
    case 0:
      return read_stored();
    case 1:
      litlen = fixed_tables().litlen;
      dist = fixed_tables().dist;
      state = State::kBlock;
      return true;
    case 2:
      return read_dynamic();
    default:
      return fail();
  }
}

bool Stream::read_stored() {
  const unsigned partial = n % 8;  // a stored block starts on a byte boundary
  buf >>= partial;
  n -= partial;
  refill();
  const uint32_t len = bits(16), nlen = bits(16);
  if ((len ^ 0xffff) != nlen || len > static_cast<size_t>(out_end - out)) return fail();
  uint32_t left = len;
  for (; left > 0 && n >= 8; --left) *out++ = static_cast<unsigned char>(bits(8));  // bytes already in buf
  if (left > 0) {
    // buf is empty now (its bits past n were read ahead from where p was: drop them); the rest comes
    // straight from the input.
    buf = 0;
    if (overrun > 0 || static_cast<size_t>(end - p) < left) return fail();
    std::memcpy(out, p, left);
    out += left;
    p += left;
  }
  return final_block ? finish() : true;  // (state stays kHeader)
}

bool Stream::read_dynamic() {
  const unsigned nlitlen = bits(5) + 257, ndist = bits(5) + 1, nprecode = bits(4) + 4;
  if (nlitlen > 286 || ndist > 30) return fail();
  uint8_t lengths[286 + 30] = {};
  for (unsigned i = 0; i < nprecode; ++i) {
    if (n < 3) refill();
    lengths[kPrecodeOrder[i]] = static_cast<uint8_t>(bits(3));
  }
  uint32_t precode[kPrecodeEnough];
  if (!build_table(lengths, 19, kPrecodeRoot, precode, kPrecodeEnough, false, precode_entry)) return fail();
  std::fill(lengths, lengths + 19, 0);
  const unsigned total = nlitlen + ndist;
  for (unsigned i = 0; i < total;) {
    if (n < 7 + 7) {  // a code-length code and its repeat count
      refill();
      if (overrun > kMaxOverrun) return fail();
    }
    uint64_t saved;
    const uint32_t e = lookup(precode, kPrecodeRoot, buf, n, saved);
    if ((e & kKindMask) == kInvalid) return fail();
    const uint32_t symbol = value(e);
    if (symbol < 16) {
      lengths[i++] = static_cast<uint8_t>(symbol);
      continue;
    }
    uint8_t repeated = 0;
    unsigned times;
    if (symbol == 16) {
      if (i == 0) return fail();
      repeated = lengths[i - 1];
      times = 3 + bits(2);
    } else if (symbol == 17) {
      times = 3 + bits(3);
    } else {
      times = 11 + bits(7);
    }
    if (i + times > total) return fail();
    std::fill(lengths + i, lengths + i + times, repeated);
    i += times;
  }
  if (lengths[256] == 0) return fail();  // a block must be able to end
  if (!build_table(lengths, nlitlen, kLitlenRoot, own_litlen, kLitlenEnough, false, litlen_entry) ||
      !build_table(lengths + nlitlen, ndist, kDistRoot, own_dist, kDistEnough, true, dist_entry))
    return fail();
  litlen = own_litlen;
  dist = own_dist;
  state = State::kBlock;
  return true;
}

// The end of the final block: every output byte written, and the input used to its last byte.
bool Stream::finish() {
  const uint64_t used_bits = (static_cast<uint64_t>(p - start) + overrun) * 8 - n;
  if (out != out_end || (used_bits + 7) / 8 != static_cast<uint64_t>(end - start)) return fail();
  state = State::kDone;
  return true;
}

// One symbol with every bound checked (near either end of a stream).
bool Stream::slow_symbol() {
  refill();
  if (overrun > kMaxOverrun) return fail();
  uint64_t saved;
  const uint32_t e = lookup(litlen, kLitlenRoot, buf, n, saved);
  const uint32_t kind = e & kKindMask;
  if (kind == kValue) {
    if (out == out_end) return fail();
    *out++ = static_cast<unsigned char>(value(e));
    return true;
  }
  if (kind == kEndOfBlock) {
    state = State::kHeader;
    return final_block ? finish() : true;
  }
  if (kind != kLength) return fail();
  const uint32_t length = value(e) + extra_value(saved, e);
  refill();
  const uint32_t d = lookup(dist, kDistRoot, buf, n, saved);
  if ((d & kKindMask) != kValue) return fail();
  const uint32_t distance = value(d) + extra_value(saved, d);
  if (distance > static_cast<size_t>(out - out_begin) || length > static_cast<size_t>(out_end - out)) return fail();
  for (uint32_t i = 0; i < length; ++i, ++out) *out = out[-static_cast<ptrdiff_t>(distance)];
  return true;
}

// The hot state of one stream, held in registers by the fast loop.
struct Regs {
  const unsigned char* p;
  const unsigned char* p_limit;  // fast only while p <= p_limit
  uint64_t buf;
  unsigned n;
  uint32_t next;  // the main-table entry for buf's next bits, looked up ahead (not yet consumed)
  unsigned char* out;
  unsigned char* out_limit;  // fast only while out <= out_limit
  unsigned char* out_begin;
  const uint32_t* litlen;
  const uint32_t* dist;

  // REQUIRES: s.fast_ready() (so the limits lie inside the buffers).
  void load(Stream& s) {
    refill_fast(s.p, s.buf, s.n);
    p = s.p;
    p_limit = s.end - kFastInMargin;
    buf = s.buf;
    n = s.n;
    out = s.out;
    out_limit = s.out_end - kFastOutMargin;
    out_begin = s.out_begin;
    litlen = s.litlen;
    dist = s.dist;
    next = litlen[buf & kLitlenMask];
  }
  void store(Stream& s) const {  // (the entry looked up ahead is dropped: its bits are still in buf)
    s.p = p;
    s.buf = buf;
    s.n = n;
    s.out = out;
  }
  bool ready() const { return p <= p_limit && out <= out_limit; }
  void consume(uint32_t e) {
    buf >>= consumed(e);
    n -= consumed(e);
  }
};

// Copies a match of `length` bytes from `distance` back, in 16- or 8-byte steps where the source
// cannot overlap the step (writing up to 31 bytes past the match, inside the fast path's margin).
inline void copy_match(unsigned char* out, uint32_t distance, uint32_t length) {
  const unsigned char* src = out - distance;
  unsigned char* const stop = out + length;
  if (distance >= 16) {
    do {
      std::memcpy(out, src, 16);
      out += 16;
      src += 16;
    } while (out < stop);
  } else if (distance >= 8) {
    do {
      std::memcpy(out, src, 8);
      out += 8;
      src += 8;
    } while (out < stop);
  } else if (distance == 1) {
    std::memset(out, *src, length);
  } else {
    for (; out < stop; ++out, ++src) *out = *src;
  }
}

enum class Step { kMore, kEndOfBlock, kInvalid };

// One step of a stream that is ready(): up to three literals, or up to two and then a match (or the
// block's end). As in libdeflate, the next entry is looked up before the refill and the output
// store, so each literal costs one lookup, one shift and one mask on the chain, and one branch.
// Bits: a refill leaves 56 or more; a main-table literal takes at most 11, a length code with its
// extra bits 20, and the entry looked up ahead needs 11 valid bits; a distance (28 bits with its
// extra bits) gets a refill of its own.
__attribute__((always_inline)) inline Step fast_step(Regs& r) {
  refill_fast(r.p, r.buf, r.n);
  uint32_t e = r.next;
  uint64_t saved = r.buf;
  r.consume(e);
  if ((e & kKindMask) == kValue) {
    uint32_t literal = value(e);
    e = r.litlen[r.buf & kLitlenMask];
    saved = r.buf;
    r.consume(e);
    *r.out++ = static_cast<unsigned char>(literal);
    if ((e & kKindMask) == kValue) {
      literal = value(e);
      e = r.litlen[r.buf & kLitlenMask];
      saved = r.buf;
      r.consume(e);
      *r.out++ = static_cast<unsigned char>(literal);
      if ((e & kKindMask) == kValue) {
        r.next = r.litlen[r.buf & kLitlenMask];
        *r.out++ = static_cast<unsigned char>(value(e));
        return Step::kMore;
      }
    }
  }
  // `e` is consumed and is not a main-table literal.
  if ((e & kKindMask) == kSubtable) [[unlikely]] {
    e = r.litlen[value(e) + (r.buf & ((uint32_t{1} << code_length(e)) - 1))];
    saved = r.buf;
    r.consume(e);
    if ((e & kKindMask) == kValue) {
      *r.out++ = static_cast<unsigned char>(value(e));
      refill_fast(r.p, r.buf, r.n);
      r.next = r.litlen[r.buf & kLitlenMask];
      return Step::kMore;
    }
  }
  if ((e & kKindMask) != kLength) [[unlikely]]
    return (e & kKindMask) == kEndOfBlock ? Step::kEndOfBlock : Step::kInvalid;
  const uint32_t length = value(e) + extra_value(saved, e);
  refill_fast(r.p, r.buf, r.n);
  uint32_t d = r.dist[r.buf & kDistMask];
  saved = r.buf;
  r.consume(d);
  if ((d & kKindMask) == kSubtable) [[unlikely]] {
    d = r.dist[value(d) + (r.buf & ((uint32_t{1} << code_length(d)) - 1))];
    saved = r.buf;
    r.consume(d);
  }
  const uint32_t distance = value(d) + extra_value(saved, d);
  if ((d & kKindMask) != kValue || distance > static_cast<size_t>(r.out - r.out_begin)) [[unlikely]]
    return Step::kInvalid;
  r.next = r.litlen[r.buf & kLitlenMask];
  copy_match(r.out, distance, length);
  r.out += length;
  return Step::kMore;
}

// Leaves a stream that fast_step stopped: at a block's end, or failed.
void stop_fast(Stream& s, const Regs& r, Step why) {
  r.store(s);
  if (why == Step::kInvalid) {
    s.state = State::kFailed;
    return;
  }
  s.state = State::kHeader;
  if (s.final_block) s.finish();
}

// Two streams in turn, one step each, while both are ready: the two lookup chains overlap.
__attribute__((noinline)) void fast_pair(Stream& a, Stream& b) {
  Regs ra, rb;
  ra.load(a);
  rb.load(b);
  while (ra.ready() && rb.ready()) {
    if (const Step why = fast_step(ra); why != Step::kMore) {
      stop_fast(a, ra, why);
      rb.store(b);
      return;
    }
    if (const Step why = fast_step(rb); why != Step::kMore) {
      stop_fast(b, rb, why);
      ra.store(a);
      return;
    }
  }
  ra.store(a);
  rb.store(b);
}

__attribute__((noinline)) void fast_single(Stream& a) {
  Regs ra;
  ra.load(a);
  while (ra.ready()) {
    if (const Step why = fast_step(ra); why != Step::kMore) {
      stop_fast(a, ra, why);
      return;
    }
  }
  ra.store(a);
}

// Advances a stream that is not ready for the fast loop until it is, or is done or failed.
void advance_slowly(Stream& s) {
  while (!s.fast_ready() && (s.state == State::kHeader || s.state == State::kBlock)) {
    if (s.state == State::kHeader)
      s.read_header();
    else
      s.slow_symbol();
  }
}

}  // namespace

bool inflate_streams(std::span<const InflateJob> jobs) {
  Stream streams[kStreams];
  Stream* slot[kStreams] = {};
  size_t next = 0;
  for (;;) {
    Stream* active[kStreams];
    int count = 0;
    for (int i = 0; i < kStreams; ++i) {
      Stream*& s = slot[i];
      for (;;) {
        if (!s) {
          if (next == jobs.size()) break;
          s = &streams[i];
          s->start_job(jobs[next++]);
        }
        advance_slowly(*s);
        if (s->state == State::kFailed) return false;
        if (s->state != State::kDone) break;
        s = nullptr;  // done: take the next job into this slot
      }
      if (s) active[count++] = s;
    }
    if (count == 0) return true;
    if (count == 2)
      fast_pair(*active[0], *active[1]);
    else
      fast_single(*active[0]);
  }
}

}  // namespace strata::data::detail
