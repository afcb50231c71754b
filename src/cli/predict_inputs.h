// What `strata predict` reads as INPUT: every example of one file as a tensor [N, ...], from the forms people keep
// examples in:
//   - IDX (Fashion-MNIST's t10k-images-idx3-ubyte[.gz]);
//   - .npy arrays [N, ...] (float32, uint8, int32 or int64);
//   - TFRecord files of tf.train.Example (.tfrecord, .tfrecords or .tfrec, gzip or zlib detected): the input is the
//     feature named by `x_feature`, or else the one feature whose size is one example of the model's input (a bytes
//     value of raw uint8 or float32 values, a float list or an int64 list);
//   - CSV (.csv): a row per example, a header optional; a header column named "label" is left out, so Kaggle's
//     fashion-mnist_test.csv reads as it is.
// TFRecord and CSV examples come shaped as the model's input; IDX and .npy as the file holds them (the caller fits
// them to the model).
//
// Thread-safety: free functions with no shared state.
#pragma once

#include <string>

#include "strata/tensor.h"
#include "strata/train/saved_model.h"

namespace strata::cli {

// The examples of `path` for `model`; InvalidArgument or ShapeError naming the file when they cannot be.
Tensor read_predict_input(const std::string& path, const SavedModelInfo& model, const std::string& x_feature);

}  // namespace strata::cli
