// Everything of strata's nn layer: the Layer base, functional graphs and every concrete layer.
//
//   #include <strata/nn/nn.h>
//   nn::Conv2D conv(32, 3, "relu");
//   Variable y = nn::Dense(10)(nn::Flatten()(nn::MaxPool2D(2)(conv(images))));
//
// Thread-safety: see each header.
#pragma once

#include "strata/nn/attention.h"
#include "strata/nn/conv_layers.h"
#include "strata/nn/core_layers.h"
#include "strata/nn/functional.h"
#include "strata/nn/layer.h"
#include "strata/nn/layer_options.h"
#include "strata/nn/merge_layers.h"
#include "strata/nn/normalization.h"
#include "strata/nn/policy.h"
#include "strata/nn/preprocessing.h"
#include "strata/nn/recurrent.h"
#include "strata/nn/transformer.h"
