// inflate_streams against zlib: the same bytes for every block type, strategy and flush zlib writes,
// one stream or several decoded together; false for wrong sizes and trailing or missing bytes; and,
// on damaged streams, never a success zlib would not give with the same bytes (ASan checks that it
// stays inside its buffers).
#include "data/inflate_streams.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace strata::data::detail {
namespace {

using Bytes = std::vector<unsigned char>;

struct Deflated {
  Bytes raw;
  Bytes compressed;
};

// zlib's raw deflate of `raw`, with a flush of the given kind every `flush_every` bytes (0: none).
Bytes deflate_raw(const Bytes& raw, int level, int strategy, size_t flush_every = 0, int flush = Z_SYNC_FLUSH) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, level, Z_DEFLATED, -15, 9, strategy), Z_OK);
  Bytes out(deflateBound(&z, raw.size()) + 64 + (flush_every ? 16 * (raw.size() / flush_every + 1) : 0));
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  size_t pos = 0;
  const size_t step = flush_every ? flush_every : raw.size();
  do {
    const size_t n = std::min(step, raw.size() - pos);
    z.next_in = const_cast<unsigned char*>(raw.data()) + pos;
    z.avail_in = static_cast<uInt>(n);
    pos += n;
    const int mode = pos == raw.size() ? Z_FINISH : flush;
    const int rc = deflate(&z, mode);
    EXPECT_TRUE(rc == (mode == Z_FINISH ? Z_STREAM_END : Z_OK)) << rc;
  } while (pos < raw.size());
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// zlib's verdict: `in` is one complete raw deflate stream using all of its bytes and inflating to
// exactly `out_size` bytes, which it returns.
bool zlib_inflates(const Bytes& in, size_t out_size, Bytes* out) {
  z_stream z{};
  if (inflateInit2(&z, -15) != Z_OK) return false;
  out->assign(out_size + 1, 0);
  z.next_in = const_cast<unsigned char*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out->data();
  z.avail_out = static_cast<uInt>(out->size());
  const int rc = inflate(&z, Z_FINISH);
  const bool ok = rc == Z_STREAM_END && z.avail_in == 0 && z.total_out == out_size;
  inflateEnd(&z);
  out->resize(out_size);
  return ok;
}

bool ours(const std::vector<const Bytes*>& ins, const std::vector<size_t>& sizes, std::vector<Bytes>* outs) {
  outs->assign(ins.size(), {});
  std::vector<InflateJob> jobs;
  for (size_t i = 0; i < ins.size(); ++i) {
    (*outs)[i].assign(sizes[i], 0xcd);
    jobs.push_back({ins[i]->data(), ins[i]->size(), (*outs)[i].data(), sizes[i]});
  }
  return inflate_streams(jobs);
}

Bytes inflate_one(const Bytes& in, size_t out_size, bool* ok) {
  std::vector<Bytes> outs;
  *ok = ours({&in}, {out_size}, &outs);
  return outs[0];
}

// Data with the texture of the inputs that matter: image-like rows with zero runs and noise, text,
// long repeats, incompressible bytes.
Bytes sample(size_t n, int kind, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0:  // pixels: dark background, a noisy object in the middle of each 28-byte row
        b[i] = (i % 28 > 6 && i % 28 < 21 && (i / 28) % 28 > 4) ? static_cast<unsigned char>(rng() % 200 + 30) : 0;
        break;
      case 1:  // words
        b[i] = static_cast<unsigned char>("the quick brown fox jumps over a lazy dog "[(i * 7 + rng() % 3) % 42]);
        break;
      case 2:  // long repeats of a short pattern
        b[i] = static_cast<unsigned char>("abcabcabd"[i % 9]);
        break;
      default:  // random
        b[i] = static_cast<unsigned char>(rng());
    }
  }
  return b;
}

TEST(InflateStreamsTest, MatchesZlibForEveryLevelStrategyAndSize) {
  const int strategies[] = {Z_DEFAULT_STRATEGY, Z_FILTERED, Z_HUFFMAN_ONLY, Z_RLE, Z_FIXED};
  for (const size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{100}, size_t{5000}, size_t{70000}, size_t{300000}})
    for (int kind = 0; kind < 4; ++kind)
      for (const int level : {0, 1, 6, 9})
        for (const int strategy : strategies) {
          const Bytes raw = sample(n, kind, static_cast<uint32_t>(n + kind));
          const Bytes z = deflate_raw(raw, level, strategy);
          bool ok = false;
          const Bytes got = inflate_one(z, raw.size(), &ok);
          ASSERT_TRUE(ok) << "n " << n << " kind " << kind << " level " << level << " strategy " << strategy;
          ASSERT_EQ(got, raw) << "n " << n << " kind " << kind << " level " << level << " strategy " << strategy;
        }
}

TEST(InflateStreamsTest, FlushPointsAndStoredBlocksInTheMiddle) {
  for (const int flush : {Z_SYNC_FLUSH, Z_FULL_FLUSH, Z_PARTIAL_FLUSH})
    for (const size_t every : {size_t{1}, size_t{7}, size_t{1000}, size_t{65536}}) {
      const Bytes raw = sample(200000, 0, 3);
      const Bytes z = deflate_raw(raw, 9, Z_FILTERED, every, flush);
      bool ok = false;
      EXPECT_EQ(inflate_one(z, raw.size(), &ok), raw) << "flush " << flush << " every " << every;
      EXPECT_TRUE(ok);
    }
}

TEST(InflateStreamsTest, ManyStreamsDecodedTogetherGiveEachItsBytes) {
  std::vector<Bytes> raws, zs;
  for (int i = 0; i < 7; ++i) {
    // Uneven sizes, so that streams end at different times and slots are refilled mid-way.
    raws.push_back(sample(static_cast<size_t>(1000 + i * 37000), i % 4, static_cast<uint32_t>(i)));
    zs.push_back(deflate_raw(raws.back(), i % 2 ? 9 : 1, i % 3 ? Z_FILTERED : Z_DEFAULT_STRATEGY));
  }
  std::vector<const Bytes*> ins;
  std::vector<size_t> sizes;
  for (int i = 0; i < 7; ++i) {
    ins.push_back(&zs[i]);
    sizes.push_back(raws[i].size());
  }
  std::vector<Bytes> outs;
  ASSERT_TRUE(ours(ins, sizes, &outs));
  for (int i = 0; i < 7; ++i) EXPECT_EQ(outs[i], raws[i]) << "stream " << i;
  // An empty list is trivially fine.
  EXPECT_TRUE(inflate_streams({}));
}

TEST(InflateStreamsTest, WrongSizesAndStrayBytesAreRefused) {
  const Bytes raw = sample(50000, 0, 9);
  const Bytes z = deflate_raw(raw, 9, Z_FILTERED);
  bool ok = true;
  inflate_one(z, raw.size() - 1, &ok);  // output too small
  EXPECT_FALSE(ok);
  inflate_one(z, raw.size() + 1, &ok);  // stream ends before the output is full
  EXPECT_FALSE(ok);
  Bytes longer = z;
  longer.push_back(0);  // a byte after the final block
  inflate_one(longer, raw.size(), &ok);
  EXPECT_FALSE(ok);
  Bytes shorter(z.begin(), z.end() - 1);  // the final block cut short
  inflate_one(shorter, raw.size(), &ok);
  EXPECT_FALSE(ok);
  // One bad stream among good ones fails the whole call.
  std::vector<Bytes> outs;
  EXPECT_FALSE(ours({&z, &shorter, &z}, {raw.size(), raw.size(), raw.size()}, &outs));
}

TEST(InflateStreamsTest, HandWrittenInvalidHeadersAreRefused) {
  bool ok = true;
  inflate_one(Bytes{0x07}, 0, &ok);  // BTYPE 3 (reserved), final
  EXPECT_FALSE(ok);
  inflate_one(Bytes{0x01, 0x00, 0x00, 0x00, 0x00}, 0, &ok);  // stored, LEN 0 but NLEN not its complement
  EXPECT_FALSE(ok);
  inflate_one(Bytes{0x01, 0x00, 0x00, 0xff, 0xff}, 0, &ok);  // stored, empty: valid
  EXPECT_TRUE(ok);
  inflate_one(Bytes{0x03, 0x00}, 0, &ok);  // fixed block holding only its end: valid
  EXPECT_TRUE(ok);
  // A fixed block whose first match reaches before the start of the output: length 3 (code 257,
  // 0000001), distance 1 (code 0, 00000).
  inflate_one(Bytes{0x03, 0x02, 0x00, 0x00}, 3, &ok);
  EXPECT_FALSE(ok);
}

// Flipped bits, cut streams and random bytes: whenever we accept, zlib accepts with the same bytes.
TEST(InflateStreamsTest, DamagedStreamsNeverGiveWhatZlibWouldNot) {
  std::mt19937 rng(12345);
  int accepted = 0, refused = 0;
  for (int round = 0; round < 600; ++round) {
    const Bytes raw = sample(static_cast<size_t>(rng() % 20000), static_cast<int>(rng() % 4), rng());
    Bytes z = deflate_raw(raw, static_cast<int>(rng() % 10), round % 5 == 4 ? Z_FIXED : Z_DEFAULT_STRATEGY);
    const int damage = round % 4;
    if (damage == 0 && !z.empty()) {
      for (int k = 0; k < 1 + round % 3; ++k) z[rng() % z.size()] ^= static_cast<unsigned char>(1u << (rng() % 8));
    } else if (damage == 1 && !z.empty()) {
      z.resize(rng() % z.size());
    } else if (damage == 2) {
      for (auto& byte : z) byte = static_cast<unsigned char>(rng());
    } else if (!z.empty()) {
      z[rng() % z.size()] = static_cast<unsigned char>(rng());
    }
    for (const size_t size : {raw.size(), raw.size() + 1 + rng() % 100}) {
      bool ok = false;
      const Bytes got = inflate_one(z, size, &ok);
      Bytes want;
      if (ok) {
        ++accepted;
        ASSERT_TRUE(zlib_inflates(z, size, &want)) << "round " << round;
        ASSERT_EQ(got, want) << "round " << round;
      } else {
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 500);  // the damage is real
}

}  // namespace
}  // namespace strata::data::detail
