// CIFAR-10 / CIFAR-100 binary versions: records land in the dataset in file order, pixels as
// [3, 32, 32] planes normalised per channel, and every malformed folder is an error naming the file.
#include "data/cifar.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/image_dataset_catalog.h"
#include "testing/cifar_files.h"
#include "testing/process.h"

namespace ddp {
namespace {

bool Has(const absl::Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

// The float the model sees for byte `pixel` of channel `c` under `norm`.
float Normalised(const ImageNormalization& norm, int c, int pixel) {
  return (pixel / 255.0f - norm.mean[c]) / norm.stddev[c];
}

TEST(CifarTest, Cifar10RecordsAreTheDatasetInFileOrder) {
  const std::string dir = TempPath("cifar10_order");
  WriteSyntheticCifar10(dir, /*train=*/10, /*test=*/3, /*seed=*/1);
  const std::vector<CifarRecord> train = SyntheticCifarRecords(10, 10, 1);
  absl::StatusOr<std::shared_ptr<ImageDataset>> data = LoadCifar10(dir, Split::kTrain);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ((*data)->Size(), 10);
  EXPECT_EQ((*data)->image_shape(), (Shape{3, 32, 32}));
  const ImageNormalization norm = Cifar10Normalization();
  for (int64_t i : {0, 1, 4, 9}) {  // the first records of files 1 and 3, and the last of file 5
    absl::StatusOr<Example> example = (*data)->Get(i);
    ASSERT_TRUE(example.ok()) << example.status();
    EXPECT_EQ(example->target.ToVector<int64_t>()[0], train[i].label);
    const std::vector<float> x = example->input.ToVector<float>();
    for (int p : {0, 31, 32 * 17 + 5, 1023}) {
      for (int c = 0; c < 3; ++c) {
        EXPECT_NEAR(x[c * 1024 + p], Normalised(norm, c, train[i].pixels[c * 1024 + p]), 1e-5)
            << "record " << i << " channel " << c << " pixel " << p;
      }
    }
  }
  absl::StatusOr<std::shared_ptr<ImageDataset>> test = LoadCifar10(dir, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ((*test)->Size(), 3);
}

TEST(CifarTest, TheArchivesFolderIsFoundInsideTheGivenOne) {
  const std::string parent = TempPath("cifar10_parent");
  ::mkdir(parent.c_str(), 0755);
  WriteSyntheticCifar10(parent + "/cifar-10-batches-bin", 5, 2, 2);
  absl::StatusOr<std::shared_ptr<ImageDataset>> data = LoadCifar10(parent, Split::kTrain);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->Size(), 5);
}

TEST(CifarTest, AMissingFileIsNamedWithWhereTheDataComesFrom) {
  const std::string dir = TempPath("cifar10_missing");
  WriteSyntheticCifar10(dir, 5, 2, 3);
  ASSERT_EQ(std::remove((dir + "/data_batch_3.bin").c_str()), 0);
  absl::StatusOr<std::shared_ptr<ImageDataset>> data = LoadCifar10(dir, Split::kTrain);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Has(data.status(), dir + "/data_batch_3.bin: no such file")) << data.status();
  EXPECT_TRUE(Has(data.status(), "cifar-10-binary.tar.gz")) << data.status();
}

TEST(CifarTest, ATruncatedFileOrAnEmptyOneIsAnError) {
  const std::string dir = TempPath("cifar10_truncated");
  WriteSyntheticCifar10(dir, 5, 2, 4);
  ASSERT_EQ(::truncate((dir + "/test_batch.bin").c_str(), 2 * 3073 - 1), 0);
  absl::StatusOr<std::shared_ptr<ImageDataset>> data = LoadCifar10(dir, Split::kTest);
  ASSERT_FALSE(data.ok());
  EXPECT_TRUE(
      Has(data.status(), dir + "/test_batch.bin: 6145 bytes is not a whole, non-zero number of 3073-byte"))
      << data.status();
  ASSERT_EQ(::truncate((dir + "/test_batch.bin").c_str(), 0), 0);
  data = LoadCifar10(dir, Split::kTest);
  ASSERT_FALSE(data.ok());
  EXPECT_TRUE(Has(data.status(), "test_batch.bin: 0 bytes")) << data.status();
}

TEST(CifarTest, AFifoInPlaceOfAFileIsRefusedWithoutBlocking) {
  const std::string dir = TempPath("cifar10_fifo");
  WriteSyntheticCifar10(dir, 5, 2, 8);
  ASSERT_EQ(std::remove((dir + "/test_batch.bin").c_str()), 0);
  ASSERT_EQ(::mkfifo((dir + "/test_batch.bin").c_str(), 0644), 0);
  absl::StatusOr<std::shared_ptr<ImageDataset>> data = LoadCifar10(dir, Split::kTest);
  ASSERT_FALSE(data.ok());
  EXPECT_TRUE(Has(data.status(), dir + "/test_batch.bin: it is a FIFO, not a regular file")) << data.status();
}

TEST(CifarTest, ALabelOutOfRangeIsNamedWithItsRecord) {
  const std::string dir = TempPath("cifar10_label");
  WriteSyntheticCifar10(dir, 5, 2, 5);
  std::vector<CifarRecord> records = SyntheticCifarRecords(3, 10, 5);
  records[2].label = 10;
  WriteCifarFile(dir + "/test_batch.bin", records);
  absl::StatusOr<std::shared_ptr<ImageDataset>> data = LoadCifar10(dir, Split::kTest);
  ASSERT_FALSE(data.ok());
  EXPECT_TRUE(Has(data.status(), "test_batch.bin: label 10 of record 2 is outside 0..9")) << data.status();
}

TEST(CifarTest, Cifar100TrainsOnTheFineLabelAfterTheCoarseOne) {
  const std::string dir = TempPath("cifar100");
  ::mkdir(dir.c_str(), 0755);
  std::vector<CifarRecord> records = SyntheticCifarRecords(100, 100, 6);
  WriteCifarFile(dir + "/train.bin", records, /*cifar100=*/true);
  WriteCifarFile(dir + "/test.bin", std::vector<CifarRecord>(records.begin(), records.begin() + 7), true);
  absl::StatusOr<std::shared_ptr<ImageDataset>> data = LoadCifar100(dir, Split::kTrain);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ((*data)->Size(), 100);
  absl::StatusOr<Example> last = (*data)->Get(99);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->target.ToVector<int64_t>()[0], 99);
  EXPECT_NEAR(last->input.ToVector<float>()[1024],
              Normalised(Cifar100Normalization(), 1, records[99].pixels[1024]), 1e-5);
  EXPECT_EQ((*LoadCifar100(dir, Split::kTest))->Size(), 7);
  // CIFAR-10's layout read as CIFAR-100's is caught by its size (3073 does not divide by 3074 here).
  WriteCifarFile(dir + "/test.bin", std::vector<CifarRecord>(records.begin(), records.begin() + 7));
  EXPECT_TRUE(Has(LoadCifar100(dir, Split::kTest).status(), "3074-byte CIFAR-100 records"));
}

TEST(ImageDatasetCatalogTest, NamesShapesAndDefaultFolders) {
  EXPECT_EQ(ImageDatasetNames(), (std::vector<std::string>{"fashion_mnist", "mnist", "cifar10", "cifar100"}));
  EXPECT_EQ(FindImageDataset("cifar100")->num_classes, 100);
  EXPECT_EQ(FindImageDataset("cifar10")->image_shape, (Shape{3, 32, 32}));
  EXPECT_EQ(FindImageDataset("mnist")->image_shape, (Shape{1, 28, 28}));
  EXPECT_TRUE(
      Has(FindImageDataset("imagenet").status(), "valid data sets: fashion_mnist, mnist, cifar10, cifar100"));
  const absl::Status no_folder = LoadImageDataset("cifar10", "", Split::kTest).status();
  EXPECT_TRUE(Has(no_folder, "no default folder")) << no_folder;
  EXPECT_TRUE(Has(no_folder, "test_batch.bin")) << no_folder;
  const std::string dir = TempPath("catalog_cifar10");
  WriteSyntheticCifar10(dir, 5, 4, 7);
  absl::StatusOr<std::shared_ptr<ImageDataset>> test = LoadImageDataset("cifar10", dir, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ((*test)->Size(), 4);
}

// The root torchvision's datasets download into: <root>/FashionMNIST/raw and <root>/MNIST/raw hold the IDX
// files (gzipped beside extracted ones), and passing the root loads them.
TEST(ImageDatasetCatalogTest, TorchvisionsRootIsFound) {
  const std::string fashion = kDefaultFashionMnistDir;
  if (!std::ifstream(fashion + "/t10k-labels-idx1-ubyte.gz").good()) {
    GTEST_SKIP() << "no Fashion-MNIST at " << fashion << " (tools/setup.sh installs it)";
  }
  const std::string root = TempPath("torchvision_root");
  ASSERT_EQ(RunShell(absl::StrCat("rm -rf ", root, " && mkdir -p ", root, "/FashionMNIST/raw ", root,
                                  "/MNIST/raw && cp ", fashion, "/t10k-* ", root, "/FashionMNIST/raw/ && cp ",
                                  fashion, "/t10k-* ", root, "/MNIST/raw/"))
                .exit_code,
            0);
  absl::StatusOr<std::shared_ptr<ImageDataset>> direct =
      LoadImageDataset("fashion_mnist", fashion, Split::kTest);
  for (const char* name : {"fashion_mnist", "mnist"}) {
    absl::StatusOr<std::shared_ptr<ImageDataset>> from_root = LoadImageDataset(name, root, Split::kTest);
    ASSERT_TRUE(from_root.ok()) << name << ": " << from_root.status();
    EXPECT_EQ((*from_root)->Fingerprint(), (*direct)->Fingerprint()) << name;
  }
  // The training files are not there: the error names them in the root, where they were looked for first.
  EXPECT_TRUE(
      Has(LoadImageDataset("mnist", root, Split::kTrain).status(), root + "/train-images-idx3-ubyte"));
}

TEST(ImageDatasetCatalogTest, MnistIsTheIdxLoaderWithMnistsStatistics) {
  if (!std::ifstream(std::string(kDefaultFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz").good()) {
    GTEST_SKIP() << "no Fashion-MNIST at " << kDefaultFashionMnistDir << " (tools/setup.sh installs it)";
  }
  absl::StatusOr<std::shared_ptr<ImageDataset>> fashion = LoadImageDataset("fashion_mnist", "", Split::kTest);
  absl::StatusOr<std::shared_ptr<ImageDataset>> as_mnist =
      LoadImageDataset("mnist", kDefaultFashionMnistDir, Split::kTest);
  ASSERT_TRUE(fashion.ok() && as_mnist.ok());
  // Pixel 0 of image 0 is black in both readings: -mean / stddev of each statistic.
  EXPECT_NEAR((*fashion)->Get(0)->input.ToVector<float>()[0], -0.2860 / 0.3530, 1e-5);
  EXPECT_NEAR((*as_mnist)->Get(0)->input.ToVector<float>()[0], -0.1307 / 0.3081, 1e-5);
}

}  // namespace
}  // namespace ddp
