#include "checkpoint/checkpoint_test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace ddp {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/checkpoint_test_" + name;
  fs::remove_all(dir);
  return dir;
}

std::shared_ptr<Module> Model(uint64_t seed, const std::string& name) {
  Generator g(seed);
  auto model = MakeModel(name, g);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

void TrainStep(Module& model, Optimizer& optimizer, uint64_t seed) {
  Generator g(seed);
  Tensor x = Normal({4, 1, 28, 28}, 0.0f, 1.0f, g);
  Tensor y = FromVector(std::vector<int64_t>{1, 3, 5, 7}, {4});
  optimizer.ZeroGrad();
  CrossEntropy(model.Forward(x), y).Backward();
  optimizer.Step();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

Saved SaveTrained(const std::string& name) {
  Saved saved;
  saved.dir = FreshDir(name);
  auto model = Model(1, "mlp");
  SgdOptions options;
  options.momentum = 0.9f;
  Sgd sgd(model->Parameters(), options);
  TrainStep(*model, sgd, 2);
  Generator g(3);
  saved.checkpoint = CaptureCheckpoint(*model, &sgd, SamplerState{5, 1, 64}, &g, 7, 1);
  EXPECT_TRUE(SaveCheckpoint(saved.dir, saved.checkpoint).ok());
  saved.path = saved.dir + "/step-7";
  return saved;
}

}  // namespace ddp
