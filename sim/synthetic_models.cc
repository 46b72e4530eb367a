#include "sim/synthetic_models.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {
namespace sim {
namespace {

// A convolution (no bias) with the batch norm after it, as one layer. `out_hw` is the output side.
SyntheticLayer ConvBn(const std::string& conv, const std::string& bn, int64_t in_c, int64_t out_c, int64_t k,
                      int64_t out_hw) {
  SyntheticLayer layer;
  layer.params = {{conv + ".weight", out_c * in_c * k * k}, {bn + ".weight", out_c}, {bn + ".bias", out_c}};
  layer.forward_flop_per_sample = 2.0 * out_hw * out_hw * out_c * in_c * k * k;
  return layer;
}

// One bottleneck block of torchvision's ResNet-50 (stride on the 3x3 convolution, "v1.5").
void AppendBottleneck(const std::string& prefix, int64_t in_c, int64_t width, int64_t in_hw, int stride,
                      std::vector<SyntheticLayer>* layers) {
  const int64_t out_hw = in_hw / stride, out_c = 4 * width;
  layers->push_back(ConvBn(prefix + ".conv1", prefix + ".bn1", in_c, width, 1, in_hw));
  layers->push_back(ConvBn(prefix + ".conv2", prefix + ".bn2", width, width, 3, out_hw));
  layers->push_back(ConvBn(prefix + ".conv3", prefix + ".bn3", width, out_c, 1, out_hw));
  if (stride != 1 || in_c != out_c) {
    layers->push_back(ConvBn(prefix + ".downsample.0", prefix + ".downsample.1", in_c, out_c, 1, out_hw));
  }
}

}  // namespace

ComputeProfile SyntheticProfile(const std::vector<SyntheticLayer>& layers, const SyntheticRates& rates) {
  DDP_CHECK(rates.batch > 0 && rates.flop_per_s > 0 && rates.memory_bytes_per_s > 0)
      << "rates must be positive";
  ComputeProfile profile;
  std::vector<size_t> first_param;  // index of each layer's first parameter in profile.params
  double total_params = 0;
  for (const SyntheticLayer& layer : layers) {
    first_param.push_back(profile.params.size());
    profile.forward_s += rates.batch * layer.forward_flop_per_sample / rates.flop_per_s;
    for (const ParameterShape& p : layer.params) {
      profile.params.push_back(ParameterTiming{p.name, p.numel, 0});
      total_params += static_cast<double>(p.numel);
    }
  }
  double clock = 0;
  for (size_t l = layers.size(); l-- > 0;) {
    clock += 2.0 * rates.batch * layers[l].forward_flop_per_sample / rates.flop_per_s;
    for (size_t i = layers[l].params.size(); i-- > 0;) {  // ties: reverse registration order
      profile.params[first_param[l] + i].ready_s = clock;
      profile.ready_order.push_back(first_param[l] + i);
    }
  }
  profile.backward_s = clock;
  profile.other_s = rates.optimizer_bytes_per_param * total_params / rates.memory_bytes_per_s;
  return profile;
}

std::vector<SyntheticLayer> MlpLayers(const std::vector<int64_t>& widths) {
  DDP_CHECK(widths.size() >= 2) << "an MLP needs at least two widths";
  std::vector<SyntheticLayer> layers;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const int64_t in = widths[i], out = widths[i + 1];
    DDP_CHECK(in > 0 && out > 0) << "MLP widths must be positive";
    const std::string name = absl::StrCat("fc", i + 1);
    layers.push_back(SyntheticLayer{{{name + ".weight", out * in}, {name + ".bias", out}}, 2.0 * in * out});
  }
  return layers;
}

std::vector<SyntheticLayer> ResNet50Layers() {
  std::vector<SyntheticLayer> layers = {ConvBn("conv1", "bn1", 3, 64, 7, 112)};
  const int blocks[4] = {3, 4, 6, 3};
  int64_t in_c = 64, hw = 56;  // after the stem's max pool
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = int64_t{64} << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      const int stride = (stage > 0 && b == 0) ? 2 : 1;
      AppendBottleneck(absl::StrCat("layer", stage + 1, ".", b), in_c, width, hw, stride, &layers);
      hw /= stride;
      in_c = 4 * width;
    }
  }
  layers.push_back(SyntheticLayer{{{"fc.weight", 1000 * 2048}, {"fc.bias", 1000}}, 2.0 * 2048 * 1000});
  return layers;
}

}  // namespace sim
}  // namespace ddp
