#include "data/image_dataset_catalog.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "data/cifar.h"
#include "io/file.h"

namespace ddp {
namespace {

const std::vector<ImageDatasetInfo>& Catalog() {
  static const auto* catalog = new std::vector<ImageDatasetInfo>{
      {"fashion_mnist",
       {1, 28, 28},
       10,
       kDefaultFashionMnistDir,
       "{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]"},
      {"mnist", {1, 28, 28}, 10, "", "{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]"},
      {"cifar10",
       {3, 32, 32},
       10,
       "",
       "data_batch_{1..5}.bin, test_batch.bin (the binary version) or data_batch_{1..5}, test_batch (the "
       "Python "
       "version)"},
      {"cifar100",
       {3, 32, 32},
       100,
       "",
       "train.bin, test.bin (the binary version) or train, test (the Python version)"},
  };
  return *catalog;
}

// Where `split`'s IDX files are: `folder` itself, or torchvision's layout inside it (`<folder>/MNIST/raw`,
// `<folder>/FashionMNIST/raw`: `torchvision_name`), so that the root torchvision.datasets.MNIST(root,
// download=True) filled can be passed as it is; `folder` when neither holds them (the error names the file
// expected there).
std::string IdxFolder(const std::string& folder, const char* torchvision_name, Split split) {
  const std::string labels = absl::StrCat(split == Split::kTrain ? "train" : "t10k", "-labels-idx1-ubyte");
  for (const std::string& candidate : {folder, absl::StrCat(folder, "/", torchvision_name, "/raw")}) {
    const std::string stem = absl::StrCat(candidate, "/", labels);
    if (CheckReadableFile(stem).ok() || CheckReadableFile(stem + ".gz").ok()) return candidate;
  }
  return folder;
}

}  // namespace

std::vector<std::string> ImageDatasetNames() {
  std::vector<std::string> names;
  for (const ImageDatasetInfo& info : Catalog()) names.push_back(info.name);
  return names;
}

absl::StatusOr<ImageDatasetInfo> FindImageDataset(const std::string& name) {
  for (const ImageDatasetInfo& info : Catalog()) {
    if (info.name == name) return info;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown data set \"", name, "\"; valid data sets: ", absl::StrJoin(ImageDatasetNames(), ", ")));
}

absl::StatusOr<std::shared_ptr<ImageDataset>> LoadImageDataset(const std::string& name,
                                                               const std::string& dir, Split split) {
  DDP_ASSIGN_OR_RETURN(const ImageDatasetInfo info, FindImageDataset(name));
  const std::string folder = dir.empty() ? info.default_dir : dir;
  if (folder.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", name, " data set has no default folder: name the folder that holds ", info.files));
  }
  if (name == "fashion_mnist") return LoadFashionMnist(IdxFolder(folder, "FashionMNIST", split), split);
  if (name == "mnist") {
    return LoadFashionMnist(IdxFolder(folder, "MNIST", split), split,
                            ImageNormalization{{0.1307f}, {0.3081f}});
  }
  if (name == "cifar10") return LoadCifar10(folder, split);
  return LoadCifar100(folder, split);
}

}  // namespace ddp
