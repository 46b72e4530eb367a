#include "data/cifar.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "data/cifar_pickle.h"
#include "io/file.h"

namespace ddp {
namespace {

constexpr int64_t kImageBytes = 3 * 32 * 32;

// What distinguishes the two data sets' binary versions.
struct CifarLayout {
  const char* name;         // "CIFAR-10"
  const char* archive_dir;  // the folder the archive extracts to
  const char* archive_url;  // where the binary version comes from
  int64_t label_bytes;      // bytes before the pixels
  int64_t label_offset;     // which of them is the label trained on
  int64_t num_classes;
  std::vector<std::string> train_files, test_files;
  // The Python version (data/cifar_pickle.h): where it comes from, its archive's folder, files and label key.
  const char* python_url;
  const char* python_dir;
  std::vector<std::string> python_train_files, python_test_files;
  const char* python_label_key;
};

const CifarLayout& Cifar10Layout() {
  static const CifarLayout* layout = new CifarLayout{
      "CIFAR-10",
      "cifar-10-batches-bin",
      "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
      1,
      0,
      10,
      {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"},
      {"test_batch.bin"},
      "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
      "cifar-10-batches-py",
      {"data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"},
      {"test_batch"},
      "labels"};
  return *layout;
}

const CifarLayout& Cifar100Layout() {
  static const CifarLayout* layout =
      new CifarLayout{"CIFAR-100",
                      "cifar-100-binary",
                      "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
                      2,
                      1,
                      100,
                      {"train.bin"},
                      {"test.bin"},
                      "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
                      "cifar-100-python",
                      {"train"},
                      {"test"},
                      "fine_labels"};
  return *layout;
}

// Where a split's files are: `dir` itself or the archive's folder inside it, whichever holds `first_file`;
// empty when neither does.
std::string FolderHolding(const std::string& dir, const char* archive_dir, const std::string& first_file) {
  if (CheckReadableFile(absl::StrCat(dir, "/", first_file)).ok()) return dir;
  const std::string inner = absl::StrCat(dir, "/", archive_dir);
  if (CheckReadableFile(absl::StrCat(inner, "/", first_file)).ok()) return inner;
  return "";
}

// Appends the records of one file to `pixels` and `labels`.
absl::Status ReadRecords(const CifarLayout& layout, const std::string& path, std::vector<uint8_t>& pixels,
                         std::vector<int64_t>& labels) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) {
    if (!absl::IsNotFound(bytes.status())) return bytes.status();
    return absl::NotFoundError(
        absl::StrCat(path, ": no such file; ", layout.name, " comes as its binary version (",
                     layout.archive_url, ") or its Python version (", layout.python_url,
                     ", the one torchvision downloads): extract either and pass the folder"));
  }
  const int64_t record = layout.label_bytes + kImageBytes;
  const int64_t size = static_cast<int64_t>(bytes->size());
  if (size == 0 || size % record != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes is not a whole, non-zero number of ", record, "-byte ",
                     layout.name, " records (truncated, or not the binary version of ", layout.name, ")"));
  }
  const int64_t n = size / record;
  const auto* data = reinterpret_cast<const uint8_t*>(bytes->data());
  pixels.reserve(pixels.size() + n * kImageBytes);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* at = data + i * record;
    const int64_t label = at[layout.label_offset];
    if (label >= layout.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": label ", label, " of record ", i,
                                                     " is outside 0..", layout.num_classes - 1, " (not ",
                                                     layout.name, "?)"));
    }
    labels.push_back(label);
    pixels.insert(pixels.end(), at + layout.label_bytes, at + record);
  }
  return absl::OkStatus();
}

// Appends the images and labels of one file of the Python version to `pixels` and `labels`.
absl::Status ReadPickledBatch(const CifarLayout& layout, const std::string& path,
                              std::vector<uint8_t>& pixels, std::vector<int64_t>& labels) {
  DDP_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path));
  return AppendPickledCifarBatch(bytes, path, layout.python_label_key, layout.num_classes, pixels, labels);
}

absl::StatusOr<std::shared_ptr<ImageDataset>> LoadCifar(const CifarLayout& layout, const std::string& dir,
                                                        Split split, ImageNormalization norm) {
  const bool train = split == Split::kTrain;
  const std::vector<std::string>& files = train ? layout.train_files : layout.test_files;
  const std::vector<std::string>& python_files = train ? layout.python_train_files : layout.python_test_files;
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  // The binary version where its first file is, else the Python version where its first file is, else
  // the binary version's files in `dir`, so that the error names what is missing there.
  const std::string binary = FolderHolding(dir, layout.archive_dir, files.front());
  const std::string python =
      binary.empty() ? FolderHolding(dir, layout.python_dir, python_files.front()) : "";
  if (!python.empty()) {
    for (const std::string& file : python_files) {
      DDP_RETURN_IF_ERROR(ReadPickledBatch(layout, absl::StrCat(python, "/", file), pixels, labels));
    }
  } else {
    const std::string folder = binary.empty() ? dir : binary;
    for (const std::string& file : files) {
      DDP_RETURN_IF_ERROR(ReadRecords(layout, absl::StrCat(folder, "/", file), pixels, labels));
    }
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  Tensor targets = Tensor::Empty({n}, DType::kInt64);
  std::copy(labels.begin(), labels.end(), targets.data<int64_t>());
  return std::make_shared<ImageDataset>(std::move(pixels), Shape{3, 32, 32}, std::move(targets),
                                        std::move(norm));
}

}  // namespace

ImageNormalization Cifar10Normalization() {
  return ImageNormalization{{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};
}

ImageNormalization Cifar100Normalization() {
  return ImageNormalization{{0.5071f, 0.4865f, 0.4409f}, {0.2673f, 0.2564f, 0.2762f}};
}

absl::StatusOr<std::shared_ptr<ImageDataset>> LoadCifar10(const std::string& dir, Split split,
                                                          ImageNormalization norm) {
  return LoadCifar(Cifar10Layout(), dir, split, std::move(norm));
}

absl::StatusOr<std::shared_ptr<ImageDataset>> LoadCifar100(const std::string& dir, Split split,
                                                           ImageNormalization norm) {
  return LoadCifar(Cifar100Layout(), dir, split, std::move(norm));
}

}  // namespace ddp
