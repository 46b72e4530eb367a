// Synthetic compute profiles: models described by their layers' parameter sizes and FLOPs, timed from a
// device's FLOP rate and memory bandwidth, so a 100 M-parameter MLP or ResNet-50 can be simulated
// without training it (or owning the device). Pure functions.
//
// Note [Synthetic timing]
// A layer's forward takes batch * forward_flop_per_sample / flop_per_s; its backward twice that (the
// input gradient and the weight gradient each cost as much as the forward). Backward visits the layers
// last to first; every parameter of a layer is ready when that layer's backward ends (in reverse
// registration order, as the Reducer would record them). other_s, the optimizer step, moves
// optimizer_bytes_per_param bytes per parameter at memory_bytes_per_s (SGD with momentum on float32
// reads and writes about 16 bytes per parameter). Kernel launch gaps, the loss and
// the data pipeline are not modelled: name them in the rates (a lower sustained flop_per_s).
#ifndef DDP_SIM_SYNTHETIC_MODELS_H_
#define DDP_SIM_SYNTHETIC_MODELS_H_

#include <cstdint>
#include <vector>

#include "sim/profile.h"
#include "sim/step_simulator.h"

namespace ddp {
namespace sim {

// The device a synthetic model runs on, and the per-rank batch (Note [Synthetic timing]).
struct SyntheticRates {
  int64_t batch = 32;                     // samples per rank and step
  double flop_per_s = 10e12;              // sustained FLOP rate of one rank
  double memory_bytes_per_s = 900e9;      // memory bandwidth of one rank (the optimizer step)
  double optimizer_bytes_per_param = 16;  // bytes the optimizer step moves per parameter
};

// One layer: its parameters (registration order) and its forward FLOPs per sample.
struct SyntheticLayer {
  std::vector<ParameterShape> params;
  double forward_flop_per_sample = 0;
};

// The profile of `layers` (forward order) on `rates` (Note [Synthetic timing]).
// REQUIRES: positive rates and batch.
ComputeProfile SyntheticProfile(const std::vector<SyntheticLayer>& layers, const SyntheticRates& rates);

// Linear layers widths[0] -> widths[1] -> ... with biases, named fc1, fc2, ... as nn's mlp is: layer i
// has a [widths[i+1], widths[i]] weight, a bias, and 2 * in * out forward FLOPs per sample.
// REQUIRES: at least two widths, all positive.
std::vector<SyntheticLayer> MlpLayers(const std::vector<int64_t>& widths);

// ResNet-50 with torchvision's parameter names and order (161 tensors, 25,557,032 parameters) at
// 224x224: each convolution with the batch norm after it is one layer (2 * out_h * out_w * out_c * in_c
// * k * k forward FLOPs per sample; about 8.2 GFLOP in all), and the classifier.
std::vector<SyntheticLayer> ResNet50Layers();

}  // namespace sim
}  // namespace ddp

#endif  // DDP_SIM_SYNTHETIC_MODELS_H_
