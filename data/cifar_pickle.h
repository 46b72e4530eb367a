// One batch file of CIFAR-10's or CIFAR-100's Python version (the cifar-10-python.tar.gz and
// cifar-100-python.tar.gz archives, which torchvision downloads): a pickled dict, read through
// io/pickle_reader.h without running Python's pickle machine.
//
// What the page (https://www.cs.toronto.edu/~kriz/cifar.html) specifies, and the files hold: "data", a
// numpy uint8 array [n, 3072] (each row 1024 red, 1024 green, 1024 blue bytes, each 32x32 row-major: the
// binary version's pixels), and the labels under "labels" (CIFAR-10) or "fine_labels" and "coarse_labels"
// (CIFAR-100), lists of n integers. The array is a pickled form numpy gives it:
// numpy.core.multiarray._reconstruct(ndarray, (0,), b"b") with the state (version, shape, dtype, fortran
// order, raw bytes), or from protocol 5 numpy.core.numeric._frombuffer(raw bytes, dtype, shape, order); the
// dtype numpy.dtype("u1", ...); its raw bytes a byte string (Python 2's cPickle, as in the archives; Python
// 3, whose bytes at protocol 2 io/pickle_reader.h decodes). Keys may be byte or text strings. Anything else
// is refused, naming the file and what it held.
#ifndef DDP_DATA_CIFAR_PICKLE_H_
#define DDP_DATA_CIFAR_PICKLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ddp {

// Appends the batch's images (3072 bytes each, in order) to `pixels` and its labels under `label_key` to
// `labels`, each checked to be in 0..num_classes-1. `bytes` is the file's content, `path` names it in
// errors (InvalidArgument). On error nothing is appended.
absl::Status AppendPickledCifarBatch(absl::string_view bytes, const std::string& path,
                                     absl::string_view label_key, int64_t num_classes,
                                     std::vector<uint8_t>& pixels, std::vector<int64_t>& labels);

}  // namespace ddp

#endif  // DDP_DATA_CIFAR_PICKLE_H_
