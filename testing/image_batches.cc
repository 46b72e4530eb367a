#include "testing/image_batches.h"

#include <vector>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {

ImageBatch RandomImageBatch(uint64_t seed, int64_t rows) {
  Generator g(seed);
  std::vector<int64_t> labels(rows);
  for (auto& l : labels) l = static_cast<int64_t>(g.RandomIndex(10));
  return {Normal({rows, 1, 28, 28}, 0.0f, 1.0f, g), FromVector(labels, {rows})};
}

ImageBatch ShardOf(const ImageBatch& batch, int rank, int64_t per_rank) {
  return {Contiguous(Narrow(batch.x, 0, rank * per_rank, per_rank)),
          Contiguous(Narrow(batch.y, 0, rank * per_rank, per_rank))};
}

}  // namespace ddp
