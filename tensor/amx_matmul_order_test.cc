// AmxMatmulChunkBlocks against oneDNN's matmul: with the chunk it finds, AMX tiles summed in that order
// give every output bit of the matmul on operands other than those it was found with, at ResNet-18's
// channels-last forward GEMMs and others; and where it answers 0. Skips, saying so, on a CPU without AMX
// or where oneDNN is kept off it.
#include "tensor/amx_matmul_order.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tensor/amx_test_support.h"
#include "tensor/amx_tiles.h"
#include "tensor/bf16_convert.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/threads.h"

namespace ddp {
namespace {

using amx_test::kOneDnnOffAmx;
using amx_test::OneDnnOnAmx;
using amx_test::RandomBf16;

// C [m, n] = A [m, K] B^T (B stored [n, K]) summed by AmxChunkedTile, 16 rows and 16 columns at a time.
std::vector<float> ChunkedProduct(const std::vector<BFloat16>& a, const std::vector<BFloat16>& b, int64_t m,
                                  int64_t n, int64_t K, int64_t chunk_blocks) {
  std::vector<float> c(m * n);
  std::vector<BFloat16> panel(K * 16);
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    for (int64_t j = 0; j < 16; ++j) {
      for (int64_t k = 0; k < K; ++k) panel[(k / 2) * 32 + j * 2 + k % 2] = b[(j0 + j) * K + k];
    }
    for (int64_t r0 = 0; r0 < m; r0 += 16) {
      cpu::AmxChunkedTile(a.data() + r0 * K, K, std::min<int64_t>(16, m - r0), K, panel.data(), chunk_blocks,
                          c.data() + r0 * n + j0, n);
    }
  }
  return c;
}

TEST(AmxMatmulOrderTest, TheChunksFoundGiveTheMatmulsBits) {
  if (!cpu::AmxTileDataGranted()) GTEST_SKIP() << "no AMX on this CPU (or the kernel refuses its tiles)";
  if (!OneDnnOnAmx()) GTEST_SKIP() << kOneDnnOffAmx;
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
  struct Shape {
    int64_t m, n, K;
  };
  // ResNet-18's channels-last forward GEMMs of layer3 (441 and 98 rows) and layer4 (224 and 128), at 32x32
  // images (448), K = 1440 with 96 outputs, and K <= 1152 (one chunk).
  const Shape shapes[] = {{441, 256, 2304}, {98, 256, 2304}, {224, 512, 4608}, {128, 512, 4608},
                          {448, 256, 2304}, {90, 96, 1440},  {100, 64, 576}};
  for (int threads : {1, 2}) {
    SetNumThreads(threads);
    for (const Shape& s : shapes) {
      SCOPED_TRACE(::testing::Message()
                   << "m " << s.m << " n " << s.n << " K " << s.K << ", " << threads << " threads");
      const int64_t chunk = cpu::AmxMatmulChunkBlocks(s.m, s.n, s.K);
      if (!cpu::GemmOnAmxBrgemm(false, true, s.m, s.n, s.K, s.K, s.K, s.n, false)) {
        EXPECT_EQ(chunk, 0);
        continue;
      }
      ASSERT_GT(chunk, 0);
      EXPECT_EQ(cpu::AmxMatmulChunkBlocks(s.m, s.n, s.K), chunk);  // asked once, kept
      const std::vector<BFloat16> a = RandomBf16(s.m * s.K, 1.0f, 51), b = RandomBf16(s.n * s.K, 0.05f, 52);
      std::vector<float> expected(s.m * s.n);
      cpu::Gemm(false, true, s.m, s.n, s.K, 1.0f, a.data(), s.K, b.data(), s.K, 0.0f, expected.data(), s.n);
      const std::vector<float> ours = ChunkedProduct(a, b, s.m, s.n, s.K, chunk);
      EXPECT_EQ(std::memcmp(ours.data(), expected.data(), ours.size() * sizeof(float)), 0);
    }
  }
  SetNumThreads(1);
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
}

TEST(AmxMatmulOrderTest, AnswersZeroWhereThereIsNoChunkedOrder) {
  if (!cpu::AmxTileDataGranted()) GTEST_SKIP() << "no AMX on this CPU (or the kernel refuses its tiles)";
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kOneDnn);
  EXPECT_EQ(cpu::AmxMatmulChunkBlocks(64, 64, 100), 0);   // K not a multiple of 32
  EXPECT_EQ(cpu::AmxMatmulChunkBlocks(64, 8, 576), 0);    // fewer than 16 columns
  EXPECT_EQ(cpu::AmxMatmulChunkBlocks(0, 64, 576), 0);    // no rows
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kFloat32);  // the GEMMs off oneDNN
  EXPECT_EQ(cpu::AmxMatmulChunkBlocks(441, 256, 2304), 0);
  cpu::SetBf16GemmKernel(cpu::Bf16GemmKernel::kAuto);
}

}  // namespace
}  // namespace ddp
