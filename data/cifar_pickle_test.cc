// CIFAR's Python versions (data/cifar_pickle.h): a folder of pickled batches loads as the binary version of
// the same images does, bit for bit; numpy's own pickles of every protocol are read (when a Python with
// numpy is at hand, which also checks that the batches written here are what Python unpickles); malformed
// batches are refused naming the file.
#include "data/cifar_pickle.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/cifar.h"
#include "io/file.h"
#include "testing/cifar_files.h"
#include "testing/process.h"

namespace ddp {
namespace {

bool Has(const absl::Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

// The folder `dir` (made) holding CIFAR-10's Python files, `records` split over the five training
// batches and `test` in test_batch.
void WritePickledCifar10(const std::string& dir, const std::vector<CifarRecord>& records,
                         const std::vector<CifarRecord>& test) {
  ::mkdir(dir.c_str(), 0755);
  const int64_t n = static_cast<int64_t>(records.size());
  for (int64_t file = 0; file < 5; ++file) {
    WritePickledCifarFile(
        absl::StrCat(dir, "/data_batch_", file + 1),
        std::vector<CifarRecord>(records.begin() + file * n / 5, records.begin() + (file + 1) * n / 5));
  }
  WritePickledCifarFile(dir + "/test_batch", test);
}

TEST(CifarPickleTest, ThePythonVersionLoadsAsTheBinaryOne) {
  const std::vector<CifarRecord> train = SyntheticCifarRecords(600, 10, 5),
                                 test = SyntheticCifarRecords(7, 10, 6);
  const std::string binary = TempPath("cifar10_bin_twin"), parent = TempPath("cifar10_py_parent");
  ::mkdir(binary.c_str(), 0755);
  ::mkdir(parent.c_str(), 0755);
  for (int64_t file = 0; file < 5; ++file) {
    WriteCifarFile(absl::StrCat(binary, "/data_batch_", file + 1, ".bin"),
                   std::vector<CifarRecord>(train.begin() + file * 120, train.begin() + (file + 1) * 120));
  }
  WriteCifarFile(binary + "/test_batch.bin", test);
  WritePickledCifar10(parent + "/cifar-10-batches-py", train, test);  // found inside the given folder
  for (Split split : {Split::kTrain, Split::kTest}) {
    absl::StatusOr<std::shared_ptr<ImageDataset>> from_binary = LoadCifar10(binary, split);
    absl::StatusOr<std::shared_ptr<ImageDataset>> from_pickles = LoadCifar10(parent, split);
    ASSERT_TRUE(from_binary.ok()) << from_binary.status();
    ASSERT_TRUE(from_pickles.ok()) << from_pickles.status();
    EXPECT_EQ((*from_pickles)->Size(), split == Split::kTrain ? 600 : 7);
    EXPECT_EQ((*from_pickles)->Fingerprint(), (*from_binary)->Fingerprint());
  }
}

TEST(CifarPickleTest, Cifar100TrainsOnTheFineLabels) {
  std::vector<CifarRecord> records = SyntheticCifarRecords(20, 100, 8);
  for (CifarRecord& r : records) r.label = 99 - r.label;  // fine labels that differ from i % 100
  const std::string dir = TempPath("cifar100_py");
  ::mkdir(dir.c_str(), 0755);
  WritePickledCifarFile(dir + "/train", records, /*cifar100=*/true);
  WritePickledCifarFile(dir + "/test", records, /*cifar100=*/true);
  absl::StatusOr<std::shared_ptr<ImageDataset>> data = LoadCifar100(dir, Split::kTrain);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ((*data)->Size(), 20);
  for (int64_t i : {0, 7, 19}) EXPECT_EQ((*data)->Get(i)->target.ToVector<int64_t>()[0], records[i].label);
}

// Every cut of a batch file, and batches holding something else than the page says, are refused by name.
TEST(CifarPickleTest, MalformedBatchesAreRefusedByName) {
  const std::string dir = TempPath("cifar_py_bad");
  ::mkdir(dir.c_str(), 0755);
  WritePickledCifarFile(dir + "/batch", SyntheticCifarRecords(3, 10, 9));
  absl::StatusOr<std::string> bytes = ReadFile(dir + "/batch");
  ASSERT_TRUE(bytes.ok());
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  ASSERT_TRUE(AppendPickledCifarBatch(*bytes, "b", "labels", 10, pixels, labels).ok());
  ASSERT_EQ(pixels.size(), size_t{3 * 3072});
  for (size_t cut = 0; cut < bytes->size(); cut += cut < 200 ? 1 : 97) {
    pixels.clear();
    labels.clear();
    const absl::Status status =
        AppendPickledCifarBatch(bytes->substr(0, cut), "cut", "labels", 10, pixels, labels);
    ASSERT_FALSE(status.ok()) << cut;
    EXPECT_TRUE(Has(status, "cut: ")) << status;
    EXPECT_TRUE(pixels.empty() && labels.empty()) << cut;
  }
  EXPECT_TRUE(Has(AppendPickledCifarBatch(*bytes, "b", "fine_labels", 10, pixels, labels),
                  "b: \"fine_labels\" is not a list of 3 labels"));
  EXPECT_TRUE(
      Has(AppendPickledCifarBatch(*bytes, "b", "labels", 2, pixels, labels), "b: label 2 is not in 0..1"));
  // Flipped bytes: an error naming the file, or a batch where they hit only pixels or a label's value;
  // never a crash.
  std::mt19937 random(3);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string flipped = *bytes;
    for (int f = 0; f < 3; ++f) flipped[random() % flipped.size()] = static_cast<char>(random() % 256);
    pixels.clear();
    labels.clear();
    const absl::Status status = AppendPickledCifarBatch(flipped, "flip", "labels", 10, pixels, labels);
    if (!status.ok()) {
      EXPECT_TRUE(Has(status, "flip: ")) << status;
    } else {
      EXPECT_EQ(pixels.size(), size_t{3 * 3072});
    }
  }
  // The binary version's bytes under the Python version's name.
  std::string binary(3073, '\0');
  EXPECT_TRUE(
      Has(AppendPickledCifarBatch(binary, "b", "labels", 10, pixels, labels), "b: not a readable pickle"));
}

// numpy's own pickles (Python 3: protocols 2 to 5, with text or byte-string keys; at protocol 2 bytes are
// _codecs.encode calls) and the batches this test library writes, read by Python: both directions, where
// /opt/torch2's Python has numpy (bench/pytorch_env.sh); skipped elsewhere.
TEST(CifarPickleTest, NumpysOwnPicklesAreReadAndOursAreWhatPythonReads) {
  const std::string python = "/opt/torch2/bin/python";
  if (RunShell(python + " -c 'import numpy'").exit_code != 0)
    GTEST_SKIP() << "no Python with numpy at " << python;
  const std::string dir = TempPath("cifar_numpy");
  ::mkdir(dir.c_str(), 0755);
  const std::vector<CifarRecord> records = SyntheticCifarRecords(4, 10, 11);
  WriteCifarFile(dir + "/reference.bin", records);
  WritePickledCifarFile(dir + "/ours", records);
  const std::string script = absl::StrCat(
      "import numpy, pickle, sys\n"
      "raw = open(sys.argv[1] + '/reference.bin', 'rb').read()\n"
      "recs = [raw[i * 3073:(i + 1) * 3073] for i in range(4)]\n"
      "data = numpy.frombuffer(b''.join(r[1:] for r in recs), dtype=numpy.uint8).reshape(4, 3072)\n"
      "labels = [r[0] for r in recs]\n"
      "for p in (2, 3, 4, 5):\n"
      "    with open(sys.argv[1] + '/protocol%d' % p, 'wb') as f:\n"
      "        pickle.dump({'batch_label': 'x', 'labels': labels, 'data': data.copy(), 'filenames': []}, f, "
      "p)\n"
      "    with open(sys.argv[1] + '/protocol%d_bytes_keys' % p, 'wb') as f:\n"
      "        pickle.dump({b'labels': labels, b'data': data.copy(), b'filenames': [b'a.png'] * 4}, f, p)\n"
      "ours = pickle.load(open(sys.argv[1] + '/ours', 'rb'), encoding='bytes')\n"
      "assert (ours[b'data'] == data).all() and ours[b'data'].dtype == numpy.uint8, 'data differs'\n"
      "assert ours[b'labels'] == labels, 'labels differ'\n");
  std::ofstream(dir + "/write.py") << script;
  const ProcessResult run = RunShell(absl::StrCat(python, " ", dir, "/write.py ", dir));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  for (const char* file : {"protocol2", "protocol3", "protocol4", "protocol5", "protocol2_bytes_keys",
                           "protocol3_bytes_keys", "protocol4_bytes_keys", "protocol5_bytes_keys"}) {
    SCOPED_TRACE(file);
    absl::StatusOr<std::string> bytes = ReadFile(absl::StrCat(dir, "/", file));
    ASSERT_TRUE(bytes.ok());
    std::vector<uint8_t> pixels;
    std::vector<int64_t> labels;
    const absl::Status read = AppendPickledCifarBatch(*bytes, "numpy", "labels", 10, pixels, labels);
    ASSERT_TRUE(read.ok()) << read;
    ASSERT_EQ(labels.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(labels[i], records[i].label);
      EXPECT_TRUE(std::equal(records[i].pixels.begin(), records[i].pixels.end(), pixels.begin() + i * 3072));
    }
  }
}

}  // namespace
}  // namespace ddp
