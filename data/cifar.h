// CIFAR-10 and CIFAR-100 (https://www.cs.toronto.edu/~kriz/cifar.html) as in-memory datasets of 3x32x32
// images, from their binary versions (cifar-10-binary.tar.gz, cifar-100-binary.tar.gz), laid out as below,
// or from their Python versions (cifar-10-python.tar.gz, cifar-100-python.tar.gz: the ones torchvision
// downloads; pickled batches read by data/cifar_pickle.h, files data_batch_1 .. data_batch_5 and test_batch,
// or train and test, in cifar-10-batches-py/ or cifar-100-python/). The binary version is taken where its
// first file is found, else the Python version.
//
// Record layout, one after another in each file, as the page specifies:
//   CIFAR-10:  <1 byte label 0..9> <3072 bytes: 1024 red, 1024 green, 1024 blue, each 32x32 row-major>
//              files data_batch_1.bin .. data_batch_5.bin (training), test_batch.bin (test)
//   CIFAR-100: <1 byte coarse label 0..19> <1 byte fine label 0..99> <3072 pixel bytes as above>
//              files train.bin, test.bin; the label trained on is the fine one (torchvision's CIFAR100)
// The pixels are already the [channels, height, width] layout the models take.
#ifndef DDP_DATA_CIFAR_H_
#define DDP_DATA_CIFAR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/fashion_mnist.h"
#include "data/image_dataset.h"

namespace ddp {

// The per-channel statistics of each training set's pixels / 255 (red, green, blue), the values
// PyTorch's CIFAR recipes normalise with.
ImageNormalization Cifar10Normalization();   // mean 0.4914 0.4822 0.4465, stddev 0.2470 0.2435 0.2616
ImageNormalization Cifar100Normalization();  // mean 0.5071 0.4865 0.4409, stddev 0.2673 0.2564 0.2762

// Loads `split` of CIFAR-10 from `dir`: the folder holding the .bin files (or the Python version's files),
// or the folder the archive was extracted into (which holds cifar-10-batches-bin/ or cifar-10-batches-py/).
// Inputs [3, 32, 32] normalised with `norm`, int64 labels 0..9. Errors name the file: missing (and where the
// binary version comes from), empty, not a whole number of records (truncated, or another version of the data
// set), a label out of range.
absl::StatusOr<std::shared_ptr<ImageDataset>> LoadCifar10(const std::string& dir, Split split,
                                                          ImageNormalization norm = Cifar10Normalization());

// As LoadCifar10 for CIFAR-100 (folder cifar-100-binary/ or cifar-100-python/ in the archive): fine labels
// 0..99.
absl::StatusOr<std::shared_ptr<ImageDataset>> LoadCifar100(const std::string& dir, Split split,
                                                           ImageNormalization norm = Cifar100Normalization());

}  // namespace ddp

#endif  // DDP_DATA_CIFAR_H_
