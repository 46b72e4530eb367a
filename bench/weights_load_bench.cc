// Time to load a weights file into a fresh model, as --init_from does (read, validate, convert,
// LoadStateDict), for each file given; one line per file on stdout:
//   weights_load FILE: median 41.2 ms, best 39.8 ms over 20 loads (45.0 MB)
// bench/weights_load_compare.sh runs it beside PyTorch's torch.load + load_state_dict on the same files.
//
//   bazel-bin/bench/weights_load_bench --model=resnet18 --loads=20 a.pt b.safetensors
//   bazel-bin/bench/weights_load_bench --model=resnet18 --write_prefix=/tmp/w   # writes /tmp/w.pt and
//                                                                               # /tmp/w.safetensors
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "io/file.h"
#include "nn/models.h"
#include "nn/weights_file.h"

ABSL_FLAG(std::string, model, "resnet18", "mlp | cnn | cnn_bn | resnet18 (Fashion-MNIST's input shape)");
ABSL_FLAG(int, loads, 20, "loads per file (median and best reported)");
ABSL_FLAG(std::string, write_prefix, "",
          "instead of timing, write a fresh model to PREFIX.pt and PREFIX.safetensors");

namespace ddp {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "weights_load_bench: %s\n", status.ToString().c_str());
  return 1;
}

int Run(const std::vector<std::string>& files) {
  const std::string model_name = absl::GetFlag(FLAGS_model);
  Generator generator(0);
  absl::StatusOr<std::shared_ptr<Module>> model = MakeModel(model_name, generator);
  if (!model.ok()) return Fail(model.status());
  if (const std::string prefix = absl::GetFlag(FLAGS_write_prefix); !prefix.empty()) {
    for (const char* extension : {".pt", ".safetensors"}) {
      if (absl::Status s = SaveModuleWeights(**model, prefix + extension); !s.ok()) return Fail(s);
    }
    return 0;
  }
  for (const std::string& file : files) {
    std::vector<double> ms;
    for (int i = 0; i < absl::GetFlag(FLAGS_loads); ++i) {
      const absl::Time start = absl::Now();
      absl::StatusOr<std::vector<std::string>> loaded = LoadModuleWeights(**model, file);
      if (!loaded.ok()) return Fail(loaded.status());
      ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    }
    std::sort(ms.begin(), ms.end());
    absl::StatusOr<std::string> bytes = ReadFile(file);
    std::printf("weights_load %s: median %.1f ms, best %.1f ms over %zu loads (%.1f MB)\n", file.c_str(),
                ms[ms.size() / 2], ms[0], ms.size(), bytes.ok() ? bytes->size() / 1e6 : 0.0);
  }
  return 0;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  return ddp::Run(std::vector<std::string>(rest.begin() + 1, rest.end()));
}
