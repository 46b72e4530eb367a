// train/train on the data sets --dataset names beside Fashion-MNIST, as a process: CIFAR-10 needs its
// folder; two ranks learn a synthetic CIFAR-10 with random crops and flips; the crops and flips do not
// depend on the loader's workers and a resumed run draws what the whole run drew, bit for bit; a checkpoint
// does not resume on another data set; CIFAR-100's models score 100 classes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "nn/safetensors.h"
#include "testing/cifar_files.h"
#include "testing/process.h"

namespace ddp {
namespace {

std::string Train() { return Runfile("train/train"); }

bool Has(const std::string& output, const std::string& text) {
  return output.find(text) != std::string::npos;
}

// A fresh, empty directory under the test's scratch space.
std::string FreshDir(const std::string& name) {
  const std::string dir = TempPath(name);
  std::string ignored;
  EXPECT_EQ(RunShell("rm -rf " + dir + " && mkdir -p " + dir, &ignored), 0) << ignored;
  return dir;
}

// The value after "final test_acc " in a train run's output; -1 when missing.
double FinalTestAccuracy(const std::string& output) {
  const size_t at = output.find("final test_acc ");
  return at == std::string::npos ? -1 : std::atof(output.c_str() + at + 15);
}

// Whether two files hold the same bytes.
bool SameBytes(const std::string& a, const std::string& b) {
  std::string diff;
  return RunShell("cmp " + a + " " + b, &diff) == 0;
}

TEST(DatasetsTrainTest, Cifar10WithoutAFolderSaysWhichFilesToPointAt) {
  std::string output;
  EXPECT_EQ(RunShell(Train() + " --dataset=cifar10 --model=cnn --max_steps=1", &output), 2) << output;
  EXPECT_TRUE(Has(output,
                  "--dataset=cifar10 has no default folder: pass --data_dir=<the folder that holds "
                  "data_batch_{1..5}.bin, test_batch.bin (the binary version) or data_batch_{1..5}, test_batch "
                  "(the Python version)>"))
      << output;
  const std::string empty = FreshDir("no_cifar");
  EXPECT_EQ(RunShell(Train() + " --dataset=cifar10 --model=cnn --max_steps=1 --data_dir=" + empty, &output),
            1);
  EXPECT_TRUE(Has(output, empty + "/test_batch.bin: no such file; CIFAR-10 comes as its binary version "
                                  "(https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz) or its Python version "
                                  "(https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz, the one torchvision "
                                  "downloads)"))
      << output;
}

TEST(DatasetsTrainTest, TwoRanksLearnACifar10FolderWithCropsAndFlips) {
  const std::string data = FreshDir("cifar10_learn");
  WriteSyntheticCifar10(data, /*train=*/2000, /*test=*/500, /*seed=*/11);
  std::string output;
  ASSERT_EQ(RunShell(absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=2 --master_port=0 ", Train(),
                                  " --dataset=cifar10 --data_dir=", data,
                                  " --model=cnn --epochs=5 --batch_size=32 ",
                                  "--random_crop_padding=4 --random_flip"),
                     &output),
            0)
      << output;
  // Ten colours on noise; chance is 0.1.
  EXPECT_GT(FinalTestAccuracy(output), 0.9) << output;
}

// Crops and flips come from (seed, epoch, index): three loader threads draw what the training thread
// draws, a run stopped at step 30 and resumed ends where the whole run ends, and without the flags the
// weights differ (the augmentation is really applied).
TEST(DatasetsTrainTest, CropsAndFlipsDoNotDependOnWorkersOrAResume) {
  const std::string data = FreshDir("cifar10_resume");
  WriteSyntheticCifar10(data, 1000, 100, 12);
  const std::string dir = FreshDir("cifar10_resume_runs");
  const std::string run = absl::StrCat(Train(), " --dataset=cifar10 --data_dir=", data,
                                       " --model=mlp --epochs=2 --batch_size=50 --lr_schedule=constant ");
  const std::string augment = " --random_crop_padding=4 --random_flip";
  std::string output;
  ASSERT_EQ(RunShell(run + augment + " --num_workers=0 --save=" + dir + "/whole", &output), 0) << output;
  ASSERT_EQ(RunShell(run + augment + " --num_workers=3 --save=" + dir + "/workers", &output), 0) << output;
  EXPECT_TRUE(SameBytes(dir + "/whole", dir + "/workers"));
  ASSERT_EQ(RunShell(run + augment + " --max_steps=30 --checkpoint_every=10 --checkpoint_dir=" + dir + "/ck",
                     &output),
            0)
      << output;
  ASSERT_EQ(RunShell(run + augment + " --resume --checkpoint_dir=" + dir + "/ck --save=" + dir + "/resumed",
                     &output),
            0)
      << output;
  EXPECT_TRUE(Has(output, "step 30")) << output;
  EXPECT_TRUE(SameBytes(dir + "/whole", dir + "/resumed"));
  ASSERT_EQ(RunShell(run + " --random_crop_padding=4 --save=" + dir + "/no_flip", &output), 0) << output;
  ASSERT_EQ(RunShell(run + " --random_flip --save=" + dir + "/no_crop", &output), 0) << output;
  EXPECT_FALSE(SameBytes(dir + "/whole", dir + "/no_flip"));
  EXPECT_FALSE(SameBytes(dir + "/whole", dir + "/no_crop"));
}

// Note [Data record]: a checkpoint of Fashion-MNIST does not resume on MNIST (same shapes: it would train on
// without a word); other crops and flips resume, with a note.
TEST(DatasetsTrainTest, AResumeOnAnotherDataSetIsRefusedBeforeLoading) {
  const std::string dir = FreshDir("resume_other_data");
  const std::string fashion = "/usr/share/datasets/fashion-mnist";
  const std::string run =
      absl::StrCat(Train(), " --model=mlp --epochs=1 --batch_size=256 --checkpoint_dir=", dir);
  std::string output;
  ASSERT_EQ(RunShell(run + " --max_steps=4 --checkpoint_every=4", &output), 0) << output;
  EXPECT_EQ(RunShell(run + " --max_steps=8 --resume --dataset=mnist --data_dir=" + fashion, &output), 1)
      << output;
  EXPECT_TRUE(Has(output, "--resume: the checkpoint in " + dir +
                              "/step-4 trained on --dataset=fashion_mnist, not "
                              "mnist"))
      << output;
  ASSERT_EQ(RunShell(run + " --max_steps=8 --resume --random_flip", &output), 0) << output;
  EXPECT_TRUE(Has(output,
                  "--resume: the checkpoint's steps drew no crops or flips, this run draws --random_flip: "
                  "the run continues, not bit for bit"))
      << output;
}

TEST(DatasetsTrainTest, Cifar100ModelsScoreAHundredClasses) {
  const std::string data = FreshDir("cifar100_train");
  WriteCifarFile(data + "/train.bin", SyntheticCifarRecords(200, 100, 13), /*cifar100=*/true);
  WriteCifarFile(data + "/test.bin", SyntheticCifarRecords(50, 100, 14), /*cifar100=*/true);
  for (const std::string model : {"mlp", "cnn_bn", "resnet18"}) {
    const std::string weights = TempPath("cifar100_" + model + ".safetensors");
    std::string output;
    ASSERT_EQ(RunShell(absl::StrCat(Train(), " --dataset=cifar100 --data_dir=", data, " --model=", model,
                                    " --max_steps=2 --batch_size=8 --eval_batch_size=50 --save=", weights),
                       &output),
              0)
        << output;
    EXPECT_TRUE(Has(output, " test_acc5 ")) << output;  // top-5 beside top-1 for 100 classes
    absl::StatusOr<NamedTensors> saved = LoadSafetensors(weights);
    ASSERT_TRUE(saved.ok()) << saved.status();
    const std::string last = model == "mlp" ? "fc3.weight" : model == "cnn_bn" ? "fc2.weight" : "fc.weight";
    const std::string first = model == "mlp" ? "fc1.weight" : "conv1.weight";
    for (const auto& [name, tensor] : *saved) {
      if (name == last) EXPECT_EQ(tensor.shape()[0], 100) << model;
      if (name == first) EXPECT_EQ(tensor.shape()[1], model == "mlp" ? 3072 : 3) << model;
    }
  }
}

}  // namespace
}  // namespace ddp
