#include "nn/models.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nn/layers.h"
#include "nn/resnet.h"

namespace ddp {
namespace {

using Entries = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

// Modules without state get names that no PyTorch attribute needs ("relu1", "pool1", ...): only
// modules with parameters or buffers show up in the state dict.
std::shared_ptr<Module> MakeMlp(Generator& g) {
  return std::make_shared<nn::Sequential>(Entries{
      {"flatten", std::make_shared<nn::Flatten>()},
      {"fc1", std::make_shared<nn::Linear>(784, 512, g)},
      {"relu1", std::make_shared<nn::ReLU>()},
      {"fc2", std::make_shared<nn::Linear>(512, 256, g)},
      {"relu2", std::make_shared<nn::ReLU>()},
      {"fc3", std::make_shared<nn::Linear>(256, 10, g)},
  });
}

std::shared_ptr<Module> MakeCnn(Generator& g, bool batch_norm) {
  nn::Conv2dOptions pad1;
  pad1.padding = 1;
  auto model = std::make_shared<nn::Sequential>();
  model->Add("conv1", std::make_shared<nn::Conv2d>(1, 32, 3, g, pad1));
  if (batch_norm) model->Add("bn1", std::make_shared<nn::BatchNorm2d>(32));
  model->Add("relu1", std::make_shared<nn::ReLU>());
  model->Add("pool1", std::make_shared<nn::MaxPool2d>(2));
  model->Add("conv2", std::make_shared<nn::Conv2d>(32, 64, 3, g, pad1));
  if (batch_norm) model->Add("bn2", std::make_shared<nn::BatchNorm2d>(64));
  model->Add("relu2", std::make_shared<nn::ReLU>());
  model->Add("pool2", std::make_shared<nn::MaxPool2d>(2));
  model->Add("flatten", std::make_shared<nn::Flatten>());
  model->Add("fc1", std::make_shared<nn::Linear>(64 * 7 * 7, 128, g));
  model->Add("relu3", std::make_shared<nn::ReLU>());
  model->Add("fc2", std::make_shared<nn::Linear>(128, 10, g));
  return model;
}

}  // namespace

std::vector<std::string> ModelNames() { return {"mlp", "cnn", "cnn_bn", "resnet18"}; }

absl::StatusOr<std::shared_ptr<Module>> MakeModel(const std::string& name, Generator& generator) {
  std::shared_ptr<Module> model;
  if (name == "mlp") {
    model = MakeMlp(generator);
  } else if (name == "cnn") {
    model = MakeCnn(generator, /*batch_norm=*/false);
  } else if (name == "cnn_bn") {
    model = MakeCnn(generator, /*batch_norm=*/true);
  } else if (name == "resnet18") {
    model = std::make_shared<nn::ResNet>(nn::ResNetOptions{}, generator);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown model \"", name,
                                                   "\"; valid models: ", absl::StrJoin(ModelNames(), ", ")));
  }
  model->AssignTensorNames();
  return model;
}

absl::StatusOr<Shape> ModelInputShape(const std::string& name) {
  const std::vector<std::string> names = ModelNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown model \"", name, "\"; valid models: ", absl::StrJoin(names, ", ")));
  }
  return Shape{1, 28, 28};
}

}  // namespace ddp
