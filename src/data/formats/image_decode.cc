// Decoding JPEG (libjpeg-turbo) and PNG (libpng) images to uint8 tensors, and the bilinear resize of image folders
// (see strata/data/image_folder.h). Both libraries report errors by longjmp; each decoder keeps every C++ object it
// owns outside the setjmp scope (in the caller's frame), so a jump skips no destructor.
//
// Thread-safety: pure functions; each call has its own decoder state.
#include <png.h>

// jpeglib.h needs FILE and size_t declared first, and jerror.h needs jpeglib.h.
#include <cstdio>

#include <jpeglib.h>

#include <jerror.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "strata/data/image_folder.h"
#include "strata/error.h"

namespace strata::data {

namespace {

// Images past this many pixels are refused before any allocation (a damaged header claiming 2^31 x 2^31).
constexpr uint64_t kMaxPixels = uint64_t{1} << 30;

struct Decoded {
  std::vector<uint8_t> pixels;
  std::vector<uint8_t*> rows;  // PNG: a pointer per row into pixels
  uint32_t height = 0, width = 0;
  int channels = 0;  // of pixels
  char message[JMSG_LENGTH_MAX > 256 ? JMSG_LENGTH_MAX : 256] = {};
  bool truncated = false;
};

// ---- JPEG
struct JpegErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  Decoded* out;
};

void jpeg_fail(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->out->message);
  std::longjmp(errors->jump, 1);
}

// Warnings are not printed; a premature end of the data is remembered (libjpeg pads it with gray, TensorFlow's
// decode_jpeg refuses it).
void jpeg_note(j_common_ptr cinfo, int level) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) errors->out->truncated = true;
}

// False (with out->message) when libjpeg fails. REQUIRES: no C++ object is made here after setjmp.
bool decode_jpeg(const unsigned char* data, size_t size, int channels, Decoded* out) {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  cinfo.err = jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = jpeg_fail;
  errors.mgr.emit_message = jpeg_note;
  errors.out = out;
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  out->height = cinfo.output_height;
  out->width = cinfo.output_width;
  out->channels = channels;
  const uint64_t pixels = uint64_t{out->height} * out->width;
  if (pixels > kMaxPixels || cinfo.output_components != channels) {
    std::snprintf(out->message, sizeof out->message, "%s", pixels > kMaxPixels ? "too large" : "unexpected channels");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  const size_t stride = size_t{out->width} * static_cast<size_t>(channels);
  try {
    out->pixels.resize(stride * out->height);
  } catch (...) {
    jpeg_destroy_decompress(&cinfo);
    throw;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->pixels.data() + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

// ---- PNG
struct PngInput {
  const unsigned char* data;
  size_t size, offset;
};

void png_read_bytes(png_structp png, png_bytep dst, png_size_t n) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (n > in->size - in->offset) png_error(png, "the file ends early (truncated)");
  std::memcpy(dst, in->data + in->offset, n);
  in->offset += n;
}

void png_fail(png_structp png, png_const_charp message) {
  auto* out = static_cast<Decoded*>(png_get_error_ptr(png));
  std::snprintf(out->message, sizeof out->message, "%s", message);
  png_longjmp(png, 1);
}

void png_ignore_warning(png_structp, png_const_charp) {}

// False (with out->message) when libpng fails. REQUIRES: no C++ object is made here after setjmp.
bool decode_png(const unsigned char* data, size_t size, int channels, Decoded* out) {
  PngInput input{data, size, 0};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, out, png_fail, png_ignore_warning);
  if (png == nullptr) {
    std::snprintf(out->message, sizeof out->message, "libpng could not start");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
    return false;
  }
  png_set_read_fn(png, &input, png_read_bytes);
  png_read_info(png, info);
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  // Everything to 8-bit gray or RGB without alpha, as TensorFlow's decode_png(channels=1 or 3) gives.
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_scale_16(png);
  png_set_strip_alpha(png);
  const bool gray = (color & PNG_COLOR_MASK_COLOR) == 0;
  // Color to gray is left to the caller (libpng's rgb_to_gray works in linear light, libjpeg's and TensorFlow's on
  // the encoded values).
  out->channels = gray ? 1 : 3;
  if (channels == 3 && gray) {
    png_set_gray_to_rgb(png);
    out->channels = 3;
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out->height = png_get_image_height(png, info);
  out->width = png_get_image_width(png, info);
  const size_t stride = size_t{out->width} * static_cast<size_t>(out->channels);
  if (uint64_t{out->height} * out->width > kMaxPixels || png_get_rowbytes(png, info) != stride) {
    std::snprintf(out->message, sizeof out->message, "%s",
                  uint64_t{out->height} * out->width > kMaxPixels ? "too large" : "unexpected row size");
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  try {
    out->pixels.resize(stride * out->height);
    out->rows.resize(out->height);
  } catch (...) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw;
  }
  for (uint32_t r = 0; r < out->height; ++r) out->rows[r] = out->pixels.data() + stride * r;
  png_read_image(png, out->rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

}  // namespace

ColorMode parse_color_mode(const std::string& name) {
  if (name == "grayscale") return ColorMode::kGrayscale;
  if (name == "rgb") return ColorMode::kRgb;
  STRATA_THROW(InvalidArgument, "color_mode: expected grayscale or rgb, got '" << name << "'");
}

const char* color_mode_name(ColorMode mode) { return mode == ColorMode::kGrayscale ? "grayscale" : "rgb"; }

Tensor decode_image(std::string_view bytes, ColorMode mode, const std::string& name) {
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const int channels = static_cast<int>(channels_of(mode));
  const bool png = bytes.size() >= 8 && png_sig_cmp(data, 0, 8) == 0;
  const bool jpeg = bytes.size() >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
  STRATA_CHECK(png || jpeg, InvalidArgument, name << ": not a JPEG or PNG image (by its first bytes)");
  Decoded out;
  const bool ok = png ? decode_png(data, bytes.size(), channels, &out) : decode_jpeg(data, bytes.size(), channels, &out);
  STRATA_CHECK(ok, DataCorrupt, name << ": cannot decode this " << (png ? "PNG" : "JPEG") << " image: " << out.message);
  STRATA_CHECK(!out.truncated, DataCorrupt, name << ": the JPEG data ends early (truncated)");
  Tensor t = Tensor::empty({out.height, out.width, channels}, DType::kUInt8);
  if (out.channels == channels) {
    std::memcpy(t.raw_data(), out.pixels.data(), out.pixels.size());
    return t;
  }
  // A color PNG read as grayscale: ITU-R 601 luma, in libjpeg's fixed point (jccolor.c), so both formats agree.
  uint8_t* g = t.data<uint8_t>();
  const uint8_t* rgb = out.pixels.data();
  for (size_t i = 0, n = size_t{out.height} * out.width; i < n; ++i, rgb += 3) {
    g[i] = static_cast<uint8_t>((19595u * rgb[0] + 38470u * rgb[1] + 7471u * rgb[2] + 32768u) >> 16);
  }
  return t;
}

Tensor read_image(const std::string& path, ColorMode mode) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in.is_open(), IoError, "cannot open '" << path << "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  STRATA_CHECK(!in.bad(), IoError, "cannot read '" << path << "'");
  return decode_image(bytes, mode, path);
}

Tensor resize_bilinear(const Tensor& image, int64_t height, int64_t width) {
  STRATA_CHECK(image.dtype() == DType::kUInt8 && image.rank() == 3, InvalidArgument,
               "resize_bilinear: wants a uint8 [h, w, c] image, got " << dtype_name(image.dtype()) << " "
                                                                     << image.shape_str());
  STRATA_CHECK(height > 0 && width > 0, InvalidArgument,
               "resize_bilinear: the size must be positive, got " << height << " x " << width);
  const int64_t in_h = image.dim(0), in_w = image.dim(1), c = image.dim(2);
  STRATA_CHECK(in_h > 0 && in_w > 0, InvalidArgument, "resize_bilinear: an empty image " << image.shape_str());
  const Tensor& src = image;
  if (in_h == height && in_w == width) return src;
  // Each output coordinate's two source neighbours and the weight of the second, as TensorFlow's
  // compute_interpolation_weights with half-pixel centers: x = (i + 0.5) * in / out - 0.5.
  struct Tap {
    int64_t lo, hi;
    float frac;
  };
  auto taps = [](int64_t out, int64_t in) {
    std::vector<Tap> t(static_cast<size_t>(out));
    const float scale = static_cast<float>(in) / static_cast<float>(out);
    for (int64_t i = 0; i < out; ++i) {
      const float x = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
      const float floor_x = std::floor(x);
      t[static_cast<size_t>(i)] = {std::max<int64_t>(static_cast<int64_t>(floor_x), 0),
                                   std::min<int64_t>(static_cast<int64_t>(std::ceil(x)), in - 1), x - floor_x};
    }
    return t;
  };
  const std::vector<Tap> ys = taps(height, in_h), xs = taps(width, in_w);
  Tensor out = Tensor::empty({height, width, c}, DType::kUInt8);
  const uint8_t* s = src.data<uint8_t>();
  uint8_t* d = out.data<uint8_t>();
  for (int64_t y = 0; y < height; ++y) {
    const Tap& ty = ys[static_cast<size_t>(y)];
    const uint8_t* top = s + ty.lo * in_w * c;
    const uint8_t* bottom = s + ty.hi * in_w * c;
    for (int64_t x = 0; x < width; ++x) {
      const Tap& tx = xs[static_cast<size_t>(x)];
      for (int64_t k = 0; k < c; ++k) {
        const float tl = top[tx.lo * c + k], tr = top[tx.hi * c + k];
        const float bl = bottom[tx.lo * c + k], br = bottom[tx.hi * c + k];
        const float t = tl + (tr - tl) * tx.frac, b = bl + (br - bl) * tx.frac;
        const float v = t + (b - t) * ty.frac;
        d[(y * width + x) * c + k] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return out;
}

}  // namespace strata::data
