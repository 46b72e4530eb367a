#include "tensor/cpu_gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include "base/check.h"

namespace ddp {
namespace cpu {

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b,
                                          ldb, beta, c, ldc);
  DDP_CHECK(status == dnnl_success) << "dnnl_sgemm failed with status " << static_cast<int>(status)
                                    << " (m=" << m << " n=" << n << " k=" << k << ")";
}

}  // namespace cpu
}  // namespace ddp
