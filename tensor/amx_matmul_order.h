// The order in which oneDNN's AMX matmul sums a bf16 GEMM's products, asked of oneDNN itself, so that a
// kernel of our own can keep it and give the matmul's bits. Internal to the tensor floor.
//
// Note [The K chunks of oneDNN's AMX matmul]
// oneDNN 2.6's AMX brgemm matmul splits K into 32-wide blocks (one TDPBF16PS each) and, where a whole K
// row of its A and B blocks would not fit its share of L2, into chunks of several blocks: each 16x16
// output tile sums one chunk's blocks in order from zero and is then added to the tile's earlier chunks
// (the first chunk written, each later one added in float32). How many blocks a chunk holds comes from its
// blocking heuristics — the GEMM's m, n and K, the L2 size it detects, the thread count — so it differs
// between GEMMs and between machines: on an AMX Xeon (family 6 model 167, 2 MB L2), at ResNet-18's
// channels-last forward GEMMs, 62 blocks at m = 441 or 448 and K = 2304 (layer3), 69 at m = 224 and 95 at
// m = 128 for K = 4608 (layer4), one chunk (in order) at m <= 64; at K <= 1152 always one chunk
// (bench/amx_probe/run.sh). Rather than copy heuristics that change with oneDNN's version, the engine asks
// the matmul: it multiplies a pseudo-random bf16 problem of exactly the GEMM's shape, called as the engine
// calls it, and finds the chunk size under which AMX tiles summed that way give every bit of three of its
// output tiles (the first, one in the middle and the last); where none does (another order: an AVX-512
// kernel, K split over threads), the answer is 0 and callers keep the matmul. One GEMM of the shape (~1-2 ms
// at layer4's) per shape and thread count, once per thread.
#ifndef DDP_TENSOR_AMX_MATMUL_ORDER_H_
#define DDP_TENSOR_AMX_MATMUL_ORDER_H_

#include <cstdint>

#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

// The 32-wide K blocks per chunk (Note [The K chunks of oneDNN's AMX matmul]) with which
// Gemm(false, true, m, n, K, 1, a, K, b, K, 0, c, n) — A [m, K] times B stored [n, K], bf16, float32 C —
// sums on oneDNN's AMX matmul at the current kernel thread count; K / 32 where it sums K in order in one
// chunk; 0 where it sums in none of these orders, K is not a multiple of 32, or the bf16 GEMMs do not run
// on oneDNN's AMX brgemm (GemmOnAmxBrgemm, tensor/cpu_gemm_bf16.h). Found once per (m, n, K, thread count)
// and thread, by multiplying a problem of that shape. Call outside parallel regions. Thread-safe.
int64_t AmxMatmulChunkBlocks(int64_t m, int64_t n, int64_t K);

// c [rows, 16] (row stride ldc, float32, overwritten) = a [rows, K] (bf16, row stride lda) times 16 columns
// of B packed as TDPBF16PS reads them (panel [K / 2][16][2]), each element summed over K in 32-wide
// blocks, chunk_blocks blocks from zero at a time, the chunks added in order. REQUIRES: AMX tile data
// granted (AmxTileDataGranted, tensor/amx_tiles.h), 1 <= rows <= 16, K a multiple of 32, chunk_blocks >= 1.
void AmxChunkedTile(const BFloat16* a, int64_t lda, int64_t rows, int64_t K, const BFloat16* panel,
                    int64_t chunk_blocks, float* c, int64_t ldc);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_AMX_MATMUL_ORDER_H_
