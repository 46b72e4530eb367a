// Helpers shared by the checkpoint tests: scratch directories, small models, file bytes, and a saved
// checkpoint of a trained model to corrupt.
#ifndef DDP_CHECKPOINT_CHECKPOINT_TEST_UTIL_H_
#define DDP_CHECKPOINT_CHECKPOINT_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"
#include "nn/module.h"
#include "nn/optimizer.h"

namespace ddp {

// A fresh, empty directory for one test (under the test's TempDir).
std::string FreshDir(const std::string& name);

// Model `name` (cnn_bn has float and int64 buffers; mlp is cheaper for the corruption tests), seeded.
std::shared_ptr<Module> Model(uint64_t seed, const std::string& name = "cnn_bn");

// One training step on a fixed batch (gives the optimizer momentum buffers / Adam moments).
void TrainStep(Module& model, Optimizer& optimizer, uint64_t seed);

// A file's bytes ("" when it cannot be read), and replacing them.
std::string ReadAll(const std::string& path);
void WriteAll(const std::string& path, const std::string& bytes);

// A saved checkpoint of a trained mlp with SGD momentum (step 7), for the corruption tests.
struct Saved {
  std::string dir;
  std::string path;  // dir/step-7
  Checkpoint checkpoint;
};
Saved SaveTrained(const std::string& name);

}  // namespace ddp

#endif  // DDP_CHECKPOINT_CHECKPOINT_TEST_UTIL_H_
