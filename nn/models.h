// The example models of train/train and the benchmarks, for small images: by default 28x28 single-channel
// ones in 10 classes (MNIST-like input [n, 1, 28, 28]), or any other [channels, height, width] and class
// count a data set has (CIFAR's [3, 32, 32], 10 or 100 classes). Parameter and buffer names match a plain
// PyTorch module with attributes fc1, fc2, ... / conv1, bn1, conv2, bn2 (tools/reference_models.py), and
// resnet18's match torchvision's resnet18 (nn/resnet.h), so safetensors checkpoints move between the two.
#ifndef DDP_NN_MODELS_H_
#define DDP_NN_MODELS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nn/module.h"
#include "tensor/random.h"

namespace ddp {

// The names MakeModel accepts: "mlp", "cnn", "cnn_bn", "resnet18".
std::vector<std::string> ModelNames();

// What the models are built for: one input sample's shape and the number of classes they score.
struct ModelInput {
  Shape image_shape = {1, 28, 28};  // [channels, height, width]
  int64_t num_classes = 10;
};

// Builds a freshly initialised model for `input` (weights drawn from `generator`), in training mode,
// with every tensor named after its state-dict key. With C x H x W images and K classes:
//   mlp:    Flatten, fc1 C*H*W->512, ReLU, fc2 512->256, ReLU, fc3 256->K.
//   cnn:    conv1 C->32 3x3 pad 1, ReLU, MaxPool 2, conv2 32->64 3x3 pad 1, ReLU, MaxPool 2, Flatten,
//           fc1 64*(H/4)*(W/4)->128, ReLU, fc2 128->K (28x28: fc1 3136->128).
//   cnn_bn: cnn with bn1 / bn2 (BatchNorm2d) after conv1 / conv2, before their ReLU.
//   resnet18: torchvision's ResNet-18 as CIFAR ResNets adapt it (nn/resnet.h): 3x3 stem C->64 without
//           max pool, 4 stages of 2 BasicBlocks (64-512 channels), global average pooling, fc 512->K;
//           62 parameter tensors, 11,172,810 values for [1, 28, 28] and 10 classes, 11,173,962 for
//           CIFAR-10 (the count PyTorch's CIFAR ResNet-18 reports).
// Errors: an unknown name (listing the valid ones), an image shape that is not 3 positive sizes, fewer
// than 2 classes, or images the cnn's two poolings would shrink to nothing (under 4x4).
absl::StatusOr<std::shared_ptr<Module>> MakeModel(const std::string& name, Generator& generator,
                                                  const ModelInput& input = {});

// OK when MakeModel(name, ..., input) would build a model; else its error, without building one.
absl::Status CheckModelInput(const std::string& name, const ModelInput& input);

}  // namespace ddp

#endif  // DDP_NN_MODELS_H_
