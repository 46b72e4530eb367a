// What the AMX kernel tests (tensor/conv_amx_test.cc, tensor/amx_matmul_order_test.cc) share: random bf16
// operands and whether oneDNN runs on AMX here. Header-only, test-only.
#ifndef DDP_TENSOR_AMX_TEST_SUPPORT_H_
#define DDP_TENSOR_AMX_TEST_SUPPORT_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/bf16_convert.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/dtype.h"

namespace ddp {
namespace amx_test {

// `count` values scale * N(0, 1) (generator seeded with `seed`), rounded to bf16.
inline std::vector<BFloat16> RandomBf16(int64_t count, float scale, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::vector<float> values(count);
  for (float& v : values) v = scale * normal(gen);
  std::vector<BFloat16> out(count);
  cpu::FloatToBFloat16Array(values.data(), out.data(), count);
  return out;
}

// Whether oneDNN uses AMX here: kept off it (ONEDNN_MAX_CPU_ISA), its kernels sum in their AVX-512
// orders, which the AMX kernels do not reproduce and the engine then does not take them.
inline bool OneDnnOnAmx() { return std::strcmp(cpu::Bf16Instructions(), "amx") == 0; }

// The skip message where OneDnnOnAmx() is false.
inline constexpr char kOneDnnOffAmx[] =
    "oneDNN is kept off AMX here (ONEDNN_MAX_CPU_ISA): its kernels sum in other orders, and the engine "
    "does not take the AMX kernels";

}  // namespace amx_test
}  // namespace ddp

#endif  // DDP_TENSOR_AMX_TEST_SUPPORT_H_
