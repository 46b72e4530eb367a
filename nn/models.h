// The example models of train/train and the benchmarks, for 28x28 single-channel images (MNIST-like
// input [n, 1, 28, 28], 10 classes). Parameter and buffer names match a plain PyTorch module with
// attributes fc1, fc2, ... / conv1, bn1, conv2, bn2 (tools/reference_models.py), and resnet18's match
// torchvision's resnet18 (nn/resnet.h), so safetensors checkpoints move between the two.
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

// Builds a freshly initialised model (weights drawn from `generator`), in training mode, with every
// tensor named after its state-dict key. An unknown name is an error listing the valid ones.
//   mlp:    Flatten, fc1 784->512, ReLU, fc2 512->256, ReLU, fc3 256->10.
//   cnn:    conv1 1->32 3x3 pad 1, ReLU, MaxPool 2, conv2 32->64 3x3 pad 1, ReLU, MaxPool 2, Flatten,
//           fc1 3136->128, ReLU, fc2 128->10.
//   cnn_bn: cnn with bn1 / bn2 (BatchNorm2d) after conv1 / conv2, before their ReLU.
//   resnet18: torchvision's ResNet-18 for 28x28 images, one input channel, 10 classes (nn/resnet.h):
//           3x3 stem without max pool, 4 stages of 2 BasicBlocks (64-512 channels), global average
//           pooling, fc 512->10; 62 parameter tensors, 11,172,810 values.
absl::StatusOr<std::shared_ptr<Module>> MakeModel(const std::string& name, Generator& generator);

// The shape of one input sample MakeModel(name) takes, without the batch dimension: [1, 28, 28] for
// every model here (the cnn's fc1 needs exactly 7x7 after two poolings; the mlp's fc1 784 = 28 * 28
// inputs; resnet18 takes any size but is sized for 28x28). An unknown name is MakeModel's error.
absl::StatusOr<Shape> ModelInputShape(const std::string& name);

}  // namespace ddp

#endif  // DDP_NN_MODELS_H_
