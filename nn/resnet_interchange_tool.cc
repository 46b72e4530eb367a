// Our side of //nn:resnet_interchange_test (nn/resnet_interchange_test.sh): resnet18 weights to and from
// torchvision through safetensors and torch.save files, with strict names.
//
//   resnet_interchange_tool check_torch DIR
//       Loads DIR/torch_weights.safetensors and DIR/torch_weights.pt (torchvision's state_dict) each into
//       MakeModel("resnet18") with strict names and checks its eval-mode logits on DIR/torch_io.safetensors'
//       input against the logits torchvision computed (max |ours - torch| <= 1e-4 * max(1, max |torch|), same
//       classes).
//   resnet_interchange_tool save_ours DIR STEPS
//       Trains a fresh resnet18 for STEPS SGD steps on random batches (so weights, running statistics and
//       num_batches_tracked = STEPS all differ from their initial values), saves its state dict to
//       DIR/ours_weights.safetensors and DIR/ours_weights.pt and a fixed input with its eval-mode logits to
//       DIR/ours_io.safetensors.
// Exit status 0 on success; a failure prints what went wrong and exits 1.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nn/models.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "nn/weights_file.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

constexpr double kTolerance = 1e-4;

absl::StatusOr<std::map<std::string, Tensor>> ReadByName(const std::string& path) {
  absl::StatusOr<NamedTensors> tensors = LoadSafetensors(path);
  if (!tensors.ok()) return tensors.status();
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, t] : *tensors) by_name[name] = t;
  for (const char* key : {"input", "logits"}) {
    if (by_name.count(key) == 0) return absl::InvalidArgumentError(absl::StrCat(path, " has no tensor \"", key, "\""));
  }
  return by_name;
}

// The comparison of the file comment.
absl::Status Compare(const std::string& what, const Tensor& actual, const Tensor& expected) {
  if (actual.shape() != expected.shape()) {
    return absl::InternalError(absl::StrCat(what, ": shape ", ShapeToString(actual.shape()), " vs ",
                                            ShapeToString(expected.shape())));
  }
  const std::vector<float> a = actual.ToVector<float>(), e = expected.ToVector<float>();
  double scale = 1.0, worst = 0.0;
  for (float v : e) scale = std::max(scale, std::abs(static_cast<double>(v)));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - e[i]));
  if (!(worst <= kTolerance * scale)) {
    return absl::InternalError(absl::StrCat(what, ": max |difference| ", worst, " exceeds ", kTolerance * scale));
  }
  if (Argmax(actual, 1).ToVector<int64_t>() != Argmax(expected, 1).ToVector<int64_t>()) {
    return absl::InternalError(absl::StrCat(what, ": predicted classes differ"));
  }
  std::printf("ok: %s: max |difference| %.3g\n", what.c_str(), worst);
  return absl::OkStatus();
}

absl::Status CheckTorch(const std::string& dir) {
  absl::StatusOr<std::map<std::string, Tensor>> io = ReadByName(dir + "/torch_io.safetensors");
  if (!io.ok()) return io.status();
  for (const char* file : {"torch_weights.safetensors", "torch_weights.pt"}) {
    Generator generator(0);
    absl::StatusOr<std::shared_ptr<Module>> model = MakeModel("resnet18", generator);
    if (!model.ok()) return model.status();
    absl::StatusOr<std::vector<std::string>> loaded =
        LoadModuleWeights(**model, dir + "/" + file, /*strict=*/true);
    if (!loaded.ok()) return loaded.status();
    (*model)->Eval();
    absl::Status same =
        Compare(absl::StrCat("torchvision ", file, " -> ours LoadModuleWeights(strict), eval logits"),
                (*model)->Forward(io->at("input")), io->at("logits"));
    if (!same.ok()) return same;
  }
  return absl::OkStatus();
}

absl::Status SaveOurs(const std::string& dir, int steps) {
  Generator generator(1);
  absl::StatusOr<std::shared_ptr<Module>> model = MakeModel("resnet18", generator);
  if (!model.ok()) return model.status();
  SgdOptions options;
  options.lr = 0.05f;
  options.momentum = 0.9f;
  Sgd sgd((*model)->Parameters(), options);
  for (int step = 0; step < steps; ++step) {
    const Tensor x = Uniform({8, 1, 28, 28}, 0.0f, 1.0f, generator);
    std::vector<int64_t> labels(8);
    for (int64_t i = 0; i < 8; ++i) labels[i] = (i * 3 + step) % 10;
    (*model)->ZeroGrad();
    CrossEntropy((*model)->Forward(x), FromVector(labels, {8})).Backward();
    sgd.Step();
  }
  (*model)->Eval();
  const Tensor input = Uniform({4, 1, 28, 28}, 0.0f, 1.0f, generator);
  const Tensor logits = (*model)->Forward(input);
  absl::Status saved = SaveModuleWeights(**model, dir + "/ours_weights.safetensors");
  if (saved.ok()) saved = SaveModuleWeights(**model, dir + "/ours_weights.pt");
  if (!saved.ok()) return saved;
  saved = SaveSafetensors(dir + "/ours_io.safetensors", {{"input", input}, {"logits", logits}});
  if (saved.ok()) std::printf("ours saved %zu tensors after %d steps\n", (*model)->StateDict().size(), steps);
  return saved;
}

int Usage() {
  std::fprintf(stderr, "usage: resnet_interchange_tool check_torch DIR | save_ours DIR STEPS\n");
  return 2;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  if (argc < 3) return ddp::Usage();
  const std::string command = argv[1], dir = argv[2];
  absl::Status status;
  int steps = 0;
  if (command == "check_torch" && argc == 3) {
    status = ddp::CheckTorch(dir);
  } else if (command == "save_ours" && argc == 4 && absl::SimpleAtoi(argv[3], &steps) && steps >= 0) {
    status = ddp::SaveOurs(dir, steps);
  } else {
    return ddp::Usage();
  }
  if (!status.ok()) {
    std::fprintf(stderr, "FAIL: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
