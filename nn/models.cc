#include "nn/models.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "nn/layers.h"
#include "nn/resnet.h"

namespace ddp {
namespace {

using Entries = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

// Modules without state get names that no PyTorch attribute needs ("relu1", "pool1", ...): only
// modules with parameters or buffers show up in the state dict.
int64_t Product(const Shape& shape) {
  int64_t product = 1;
  for (int64_t d : shape) product *= d;
  return product;
}

std::shared_ptr<Module> MakeMlp(Generator& g, const ModelInput& input) {
  return std::make_shared<nn::Sequential>(Entries{
      {"flatten", std::make_shared<nn::Flatten>()},
      {"fc1", std::make_shared<nn::Linear>(Product(input.image_shape), 512, g)},
      {"relu1", std::make_shared<nn::ReLU>()},
      {"fc2", std::make_shared<nn::Linear>(512, 256, g)},
      {"relu2", std::make_shared<nn::ReLU>()},
      {"fc3", std::make_shared<nn::Linear>(256, input.num_classes, g)},
  });
}

std::shared_ptr<Module> MakeCnn(Generator& g, const ModelInput& input, bool batch_norm) {
  nn::Conv2dOptions pad1;
  pad1.padding = 1;
  auto model = std::make_shared<nn::Sequential>();
  model->Add("conv1", std::make_shared<nn::Conv2d>(input.image_shape[0], 32, 3, g, pad1));
  if (batch_norm) model->Add("bn1", std::make_shared<nn::BatchNorm2d>(32));
  model->Add("relu1", std::make_shared<nn::ReLU>());
  model->Add("pool1", std::make_shared<nn::MaxPool2d>(2));
  model->Add("conv2", std::make_shared<nn::Conv2d>(32, 64, 3, g, pad1));
  if (batch_norm) model->Add("bn2", std::make_shared<nn::BatchNorm2d>(64));
  model->Add("relu2", std::make_shared<nn::ReLU>());
  model->Add("pool2", std::make_shared<nn::MaxPool2d>(2));
  model->Add("flatten", std::make_shared<nn::Flatten>());
  // Each MaxPool2d(2) floors the size: 28 -> 14 -> 7.
  const int64_t pooled = (input.image_shape[1] / 4) * (input.image_shape[2] / 4);
  model->Add("fc1", std::make_shared<nn::Linear>(64 * pooled, 128, g));
  model->Add("relu3", std::make_shared<nn::ReLU>());
  model->Add("fc2", std::make_shared<nn::Linear>(128, input.num_classes, g));
  return model;
}

}  // namespace

std::vector<std::string> ModelNames() { return {"mlp", "cnn", "cnn_bn", "resnet18"}; }

absl::Status CheckModelInput(const std::string& name, const ModelInput& input) {
  const std::vector<std::string> names = ModelNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown model \"", name, "\"; valid models: ", absl::StrJoin(names, ", ")));
  }
  const Shape& shape = input.image_shape;
  if (shape.size() != 3 || *std::min_element(shape.begin(), shape.end()) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--model=", name,
                                                   " takes images of shape [channels, height, ",
                                                   "width], not ", ShapeToString(shape)));
  }
  if (input.num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model=", name, " needs at least 2 classes, not ", input.num_classes));
  }
  if ((name == "cnn" || name == "cnn_bn") && (shape[1] < 4 || shape[2] < 4)) {
    return absl::InvalidArgumentError(absl::StrCat("--model=", name,
                                                   " pools twice by 2 and needs images of at ",
                                                   "least 4x4, not ", ShapeToString(shape)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Module>> MakeModel(const std::string& name, Generator& generator,
                                                  const ModelInput& input) {
  DDP_RETURN_IF_ERROR(CheckModelInput(name, input));
  std::shared_ptr<Module> model;
  if (name == "mlp") {
    model = MakeMlp(generator, input);
  } else if (name == "cnn") {
    model = MakeCnn(generator, input, /*batch_norm=*/false);
  } else if (name == "cnn_bn") {
    model = MakeCnn(generator, input, /*batch_norm=*/true);
  } else {
    nn::ResNetOptions options;
    options.in_channels = input.image_shape[0];
    options.num_classes = input.num_classes;
    model = std::make_shared<nn::ResNet>(options, generator);
  }
  model->AssignTensorNames();
  return model;
}

}  // namespace ddp
