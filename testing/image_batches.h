// Random MNIST-shaped batches for the DDP parity tests: one global batch per step, sharded by rank.
#ifndef DDP_TESTING_IMAGE_BATCHES_H_
#define DDP_TESTING_IMAGE_BATCHES_H_

#include <cstdint>

#include "tensor/tensor.h"

namespace ddp {

// Images [rows, 1, 28, 28] and their int64 labels [rows].
struct ImageBatch {
  Tensor x, y;
};

// `rows` images with N(0, 1) pixels and labels uniform in [0, 10), drawn from Generator(seed).
ImageBatch RandomImageBatch(uint64_t seed, int64_t rows);

// Rank `rank`'s contiguous shard of `per_rank` rows of `batch` (rows rank * per_rank onwards).
ImageBatch ShardOf(const ImageBatch& batch, int rank, int64_t per_rank);

}  // namespace ddp

#endif  // DDP_TESTING_IMAGE_BATCHES_H_
