// CIFAR data folders written by tests, in the binary versions' exact record layout (data/cifar.h), with
// synthetic images a model can learn: class k is a 12x12 square of colour k on noise.
#ifndef DDP_TESTING_CIFAR_FILES_H_
#define DDP_TESTING_CIFAR_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

// One record: its labels and 3072 pixel bytes (red, green, blue planes of 32x32).
struct CifarRecord {
  int coarse_label = 0;  // CIFAR-100 only
  int label = 0;         // CIFAR-10's label, CIFAR-100's fine label
  std::vector<uint8_t> pixels;
};

// `n` records with labels i % num_classes, the square of that label's colour at a random place on
// uniform noise in 0..63, drawn from `seed`. CIFAR-100's coarse label is label / 5.
std::vector<CifarRecord> SyntheticCifarRecords(int64_t n, int num_classes, uint64_t seed);

// Writes `records` to `path` in CIFAR-10's layout, or CIFAR-100's (coarse label byte first) when
// `cifar100`. The test fails (gtest) when the file cannot be written.
void WriteCifarFile(const std::string& path, const std::vector<CifarRecord>& records, bool cifar100 = false);

// Writes `records` to `path` as one batch file of the Python version (data/cifar_pickle.h), byte for byte
// as Python 2's cPickle.dump(batch, f, 2) writes the archives' files: a dict of "data" (numpy's
// _reconstruct form of a uint8 [n, 3072] array, its raw bytes one BINSTRING), the labels ("labels", or
// "fine_labels" and "coarse_labels" when `cifar100`), "batch_label" and "filenames", with the memo
// entries cPickle makes. The test fails (gtest) when the file cannot be written.
void WritePickledCifarFile(const std::string& path, const std::vector<CifarRecord>& records,
                           bool cifar100 = false);

// A CIFAR-10 folder at `dir` (made): the 5 training files share `train` records in order, test_batch.bin
// holds `test` records, each drawn by SyntheticCifarRecords.
void WriteSyntheticCifar10(const std::string& dir, int64_t train, int64_t test, uint64_t seed);

}  // namespace ddp

#endif  // DDP_TESTING_CIFAR_FILES_H_
