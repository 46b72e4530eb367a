// The training data of the C++ throughput benchmarks (bench/train_throughput,
// bench/bucket_sweep_interleaved): the same 64 pre-made batches and optimizer settings as
// bench/pytorch_reference.py, so no loader runs in the timed loop and both sides train on the same samples.
#ifndef DDP_BENCH_PREMADE_BATCHES_H_
#define DDP_BENCH_PREMADE_BATCHES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "nn/sgd.h"

namespace ddp {

// Batch b (0..63) holds samples (b * batch_size + i) % dataset.Size() for i < batch_size; rank r of W
// takes batch (step * W + r) % 64 at each step. Errors: the dataset's (a corrupt record).
absl::StatusOr<std::vector<Example>> PremadeBatches(const Dataset& dataset, int64_t batch_size);

// SGD with lr 0.01 and momentum 0.9, as the PyTorch reference.
SgdOptions BenchSgdOptions();

}  // namespace ddp

#endif  // DDP_BENCH_PREMADE_BATCHES_H_
