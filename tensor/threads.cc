#include "tensor/threads.h"

#include <omp.h>

#include "base/check.h"

namespace ddp {

void SetNumThreads(int n) {
  DDP_CHECK(n >= 1) << "thread count must be >= 1, got " << n;
  omp_set_num_threads(n);
}

int GetNumThreads() { return omp_get_max_threads(); }

}  // namespace ddp
