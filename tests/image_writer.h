// Test fixtures: PNG and JPEG files written with libpng and libjpeg-turbo from uint8 [h, w, c] tensors, so that the
// image-folder reader is tested on files it did not write. Thread-safety: none needed (each test its own files).
#pragma once

#include <png.h>

#include <cstdio>

#include <jpeglib.h>

#include <string>

#include <gtest/gtest.h>

#include "strata/tensor.h"

namespace strata::test {

// c = 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA).
inline void write_png(const std::string& path, const Tensor& image) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.height = static_cast<png_uint_32>(image.dim(0));
  png.width = static_cast<png_uint_32>(image.dim(1));
  const int64_t c = image.dim(2);
  png.format = c == 1 ? PNG_FORMAT_GRAY : c == 2 ? PNG_FORMAT_GA : c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
  ASSERT_NE(png_image_write_to_file(&png, path.c_str(), 0, image.data<uint8_t>(), 0, nullptr), 0)
      << path << ": " << png.message;
}

// c = 1 (grayscale JPEG) or 3 (YCbCr JPEG from RGB).
inline void write_jpeg(const std::string& path, const Tensor& image, int quality = 95) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_height = static_cast<JDIMENSION>(image.dim(0));
  cinfo.image_width = static_cast<JDIMENSION>(image.dim(1));
  cinfo.input_components = static_cast<int>(image.dim(2));
  cinfo.in_color_space = image.dim(2) == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const uint8_t* data = image.data<uint8_t>();
  const size_t stride = static_cast<size_t>(image.dim(1) * image.dim(2));
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(data + stride * cinfo.next_scanline);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
}

}  // namespace strata::test
