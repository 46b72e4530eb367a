// The channels-last bf16 weight gradient on AMX tiles (contracts: tensor/conv_amx_weight_gradient.h; Note
// [Channels-last weight gradients on AMX tiles] there).
#include "tensor/conv_amx_weight_gradient.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "tensor/amx_tiles.h"
#include "tensor/conv_taps.h"
#include "tensor/cpu_gemm_bf16.h"
#include "tensor/layout_transpose.h"

namespace ddp {
namespace cpu {
namespace {

constexpr int64_t kTile = 16;             // rows and columns of an accumulator tile
constexpr int64_t kTileK = 32;            // products per TDPBF16PS: a tile row of 32 bf16 (64 bytes)
constexpr int64_t kBlock = 2 * kTile;     // output and input channels per 2x2 block of tiles
constexpr int64_t kMaxGroupPixels = 448;  // the largest group bench/amx_probe/wgrad_order.cc finds in order
constexpr int64_t kChunkBytes = int64_t{1} << 20;  // A operands per chunk of groups, within L2

// One group of images as the GEMMs see it: its pixels [first, first + pixels) of the batch (images in
// order, each image's oh * ow pixels row by row), padded with zeros to `padded` (a multiple of 32), and
// where its transposed output gradient starts.
struct PixelGroup {
  int64_t first = 0, pixels = 0, padded = 0, gradient_offset = 0;
};

std::vector<PixelGroup> PixelGroups(const ConvGeometry& g, int64_t images_per_group) {
  std::vector<PixelGroup> groups;
  int64_t offset = 0;
  for (int64_t image = 0; image < g.n; image += images_per_group) {
    PixelGroup group;
    group.first = image * g.P();
    group.pixels = std::min(images_per_group, g.n - image) * g.P();
    group.padded = (group.pixels + kTileK - 1) / kTileK * kTileK;
    group.gradient_offset = offset;
    offset += g.out * group.padded;
    groups.push_back(group);
  }
  return groups;
}

// Groups [begin, end) of `groups`: consecutive groups whose transposed output gradient (the A operands)
// stays within kChunkBytes, so that it stays in L2 while every slice and tap runs over it.
struct GroupChunk {
  const std::vector<PixelGroup>* groups = nullptr;
  size_t begin = 0, end = 0;
  int64_t padded_pixels = 0;  // the chunk's groups' padded pixels together
};

// The chunks of `groups`, in order, each of at least one group.
std::vector<GroupChunk> GroupChunks(const std::vector<PixelGroup>& groups, int64_t out) {
  std::vector<GroupChunk> chunks;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const int64_t padded = groups[gi].padded;
    if (chunks.empty() || (chunks.back().padded_pixels + padded) * out * 2 > kChunkBytes) {
      chunks.push_back(GroupChunk{&groups, gi, gi, 0});
    }
    chunks.back().end = gi + 1;
    chunks.back().padded_pixels += padded;
  }
  return chunks;
}

// For every tap t = ky * kw + kx and every output pixel p of the batch: the index in x of the input pixel
// the tap reads, or -1 in the padding ([taps][n * oh * ow]), in the calling thread's buffer.
const int32_t* SourcePixels(const ConvGeometry& g) {
  thread_local std::vector<int32_t> source;
  const int64_t pixels = g.n * g.P();
  source.resize(static_cast<size_t>(g.kh * g.kw * pixels));
  int32_t* out = source.data();  // the calling thread's buffer, which ForEachTap's threads fill
  ForEachTap(g, 0, g.n, [out, pixels](int64_t row, int64_t tap, int64_t pixel) {
    out[tap * pixels + row] = static_cast<int32_t>(pixel);
  });
  return out;
}

// gy [n * oh * ow, out] as the A operands: each group's [out, padded] (its pixels along a row, zeros past
// them), groups one after another.
void TransposeGradient(const BFloat16* gy, const ConvGeometry& g, const std::vector<PixelGroup>& groups,
                       BFloat16* transposed) {
  thread_local std::vector<BFloat16> tail_buffer;
  for (const PixelGroup& group : groups) {
    const BFloat16* rows = gy + group.first * g.out;
    if (group.pixels < group.padded) {
      BFloat16* padded = AlignedScratch(tail_buffer, group.padded * g.out);
      std::memcpy(static_cast<void*>(padded), rows, sizeof(BFloat16) * group.pixels * g.out);
      std::memset(static_cast<void*>(padded + group.pixels * g.out), 0,
                  sizeof(BFloat16) * (group.padded - group.pixels) * g.out);
      rows = padded;
    }
    Transpose16(rows, 1, group.padded, g.out, transposed + group.gradient_offset);
  }
}

// One group's B operand for one tap and input channels [c0, c0 + 32): for each pair of the group's pixels,
// the 32 channels of the two input pixels the tap reads, interleaved element by element (TDPBF16PS's
// layout; [padded / 2][32][2]), zeros where a pixel reads padding or lies past the group.
__attribute__((target("avx512f,avx512bw"))) void PackPixelPairs(const BFloat16* x, const int32_t* source,
                                                                const PixelGroup& group, int64_t c,
                                                                int64_t c0, BFloat16* panel) {
  const __m512i low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7,
                                       38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
  for (int64_t pair = 0; pair < group.padded / 2; ++pair) {
    const int64_t p = 2 * pair;
    const int32_t first = p < group.pixels ? source[group.first + p] : -1;
    const int32_t second = p + 1 < group.pixels ? source[group.first + p + 1] : -1;
    const __m512i even = first < 0 ? _mm512_setzero_si512() : _mm512_loadu_si512(x + first * c + c0);
    const __m512i odd = second < 0 ? _mm512_setzero_si512() : _mm512_loadu_si512(x + second * c + c0);
    _mm512_store_si512(panel + pair * 2 * kBlock, _mm512_permutex2var_epi16(even, low, odd));
    _mm512_store_si512(panel + pair * 2 * kBlock + kBlock, _mm512_permutex2var_epi16(even, high, odd));
  }
}

// rows [32][32] (float32, row stride ld) += block [32][32] (row stride 32), element by element.
__attribute__((target("avx512f"))) void AddBlock(const float* block, float* rows, int64_t ld) {
  for (int64_t r = 0; r < kBlock; ++r) {
    for (int64_t j = 0; j < kBlock; j += kTile) {
      float* dst = rows + r * ld + j;
      _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_loadu_ps(dst), _mm512_load_ps(block + r * kBlock + j)));
    }
  }
}

// For each element q of an output channel's [32][taps] run of gw: where it lies in that channel's
// [taps][32] staging (StagingToWeights' gather indices).
std::vector<int32_t> StagingIndex(int64_t taps) {
  std::vector<int32_t> index(kBlock * taps);
  for (int64_t q = 0; q < kBlock * taps; ++q) index[q] = static_cast<int32_t>(q % taps * kBlock + q / taps);
  return index;
}

// staging [out][taps][32] (one slice's weight gradient, tap by tap) into gw [out, c, taps] at channels
// [c0, c0 + 32): each output channel's [taps][32] transposed into the [32][taps] run of gw it fills, 16
// elements per gather (`index`: StagingIndex(taps)).
__attribute__((target("avx512f"))) void StagingToWeights(const float* staging,
                                                         const std::vector<int32_t>& index,
                                                         const ConvGeometry& g, int64_t c0, float* gw) {
  const int64_t taps = g.kh * g.kw, run = kBlock * taps;
  const int64_t whole = run / kTile * kTile;
  for (int64_t o = 0; o < g.out; ++o) {
    const float* src = staging + o * run;
    float* dst = gw + (o * g.c + c0) * taps;
    for (int64_t q = 0; q < whole; q += kTile) {
      _mm512_storeu_ps(dst + q, _mm512_i32gather_ps(_mm512_loadu_si512(index.data() + q), src, 4));
    }
    for (int64_t q = whole; q < run; ++q) dst[q] = src[index[q]];
  }
}

// One tap's weight gradient for input channels [c0, c0 + 32) and all output channels over groups [begin,
// end), in `staging` (row o at staging + o * ld, 32 values): group by group, for each 32 output channels a
// 2x2 block of tiles summed from zero over the group's pixels, 32 at a time, stored (the first group of
// all) or added to the sum of the groups before in `staging` (Note [Channels-last weight gradients on AMX
// tiles]). `panel` holds the groups' B operands for this tap and these channels, one after another; a
// group's (14-28 KB) stays in L1 while its output channels go by.
__attribute__((target("amx-tile,amx-bf16"))) void TapSlice(const BFloat16* transposed,
                                                           const GroupChunk& chunk, const ConvGeometry& g,
                                                           const BFloat16* panel, int64_t ld,
                                                           float* staging) {
  alignas(64) float block[kBlock * kBlock];
  // Tiles 0-3 accumulate a 2x2 block (16 output channels x 16 input channels each), 4-5 hold A (16 output
  // channels x 32 pixels), 6-7 B (16 pixel pairs x 16 input channels).
  const AmxTileConfig config = TwoByTwoTileConfig(kTile, kTile);
  _tile_loadconfig(&config);
  const BFloat16* b = panel;
  for (size_t gi = chunk.begin; gi < chunk.end; b += (*chunk.groups)[gi].padded * kBlock, ++gi) {
    const PixelGroup& group = (*chunk.groups)[gi];
    const int64_t a_stride = group.padded * 2;
    for (int64_t o0 = 0; o0 < g.out; o0 += kBlock) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      const BFloat16* a = transposed + group.gradient_offset + o0 * group.padded;
      for (int64_t k0 = 0; k0 < group.padded; k0 += kTileK) {
        const BFloat16* bk = b + k0 * kBlock;
        _tile_loadd(4, a + k0, a_stride);
        _tile_loadd(5, a + kTile * group.padded + k0, a_stride);
        _tile_loadd(6, bk, 2 * kBlock * 2);
        _tile_loadd(7, bk + kTile * 2, 2 * kBlock * 2);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      float* rows = staging + o0 * ld;
      const bool first = gi == 0;
      float* out = first ? rows : block;
      const int64_t out_ld = first ? ld : kBlock;
      _tile_stored(0, out, out_ld * 4);
      _tile_stored(1, out + kTile, out_ld * 4);
      _tile_stored(2, out + kTile * out_ld, out_ld * 4);
      _tile_stored(3, out + kTile * out_ld + kTile, out_ld * 4);
      if (!first) AddBlock(block, rows, ld);
    }
  }
  _tile_release();
}

// True when oneDNN's matmul runs every GEMM the unfolded rows would give it (the first group's, writing;
// a full group's and the last group's, adding) on its AMX brgemm.
bool GroupGemmsOnAmxBrgemm(const ConvGeometry& g, int64_t images_per_group) {
  const int64_t K = g.K(), P = g.P(), full = std::min(images_per_group, g.n);
  const int64_t last = g.n - (g.n - 1) / images_per_group * images_per_group;
  const auto on_brgemm = [&](int64_t images, bool adding) {
    return GemmOnAmxBrgemm(true, false, g.out, K, images * P, g.out, K, K, adding);
  };
  return on_brgemm(full, false) &&
         (g.n <= images_per_group || (on_brgemm(full, true) && on_brgemm(last, true)));
}

}  // namespace

bool AmxWeightGradientApplies(const ConvGeometry& g, int64_t images_per_group) {
  return g.channels_last && g.n > 0 && g.c % kBlock == 0 && g.out % kBlock == 0 && images_per_group > 0 &&
         images_per_group * g.P() <= kMaxGroupPixels && AmxTileDataGranted() &&
         GroupGemmsOnAmxBrgemm(g, images_per_group);
}

void AmxWeightGradientChannelsLast(const BFloat16* x, const BFloat16* gy, const ConvGeometry& g,
                                   int64_t images_per_group, float* gw) {
  DDP_CHECK(AmxWeightGradientApplies(g, images_per_group))
      << "AmxWeightGradientChannelsLast: no AMX kernel for this weight gradient (c " << g.c << ", out "
      << g.out << ", " << images_per_group << " images of " << g.oh << "x" << g.ow << " per group)";
  const std::vector<PixelGroup> groups = PixelGroups(g, images_per_group);
  const int32_t* source = SourcePixels(g);
  thread_local std::vector<BFloat16> transposed_buffer;  // the calling thread's, read by every kernel thread
  BFloat16* transposed =
      AlignedScratch(transposed_buffer, groups.back().gradient_offset + g.out * groups.back().padded);
  TransposeGradient(gy, g, groups, transposed);
  const int64_t taps = g.kh * g.kw, slices = g.c / kBlock, pixels = g.n * g.P(), ld = taps * kBlock;
  const std::vector<GroupChunk> chunks = GroupChunks(groups, g.out);
  const std::vector<int32_t> index = StagingIndex(taps);
  thread_local std::vector<float> staging_buffer;  // [slices][out][taps][32], shared like `transposed`
  float* staging = AlignedScratch(staging_buffer, slices * g.out * ld);
  for (const GroupChunk& chunk : chunks) {
    const bool last = &chunk == &chunks.back();
#pragma omp parallel if (slices > 1)
    {
      thread_local std::vector<BFloat16> panel_buffer;  // each kernel thread's own
      BFloat16* panel = AlignedScratch(panel_buffer, chunk.padded_pixels * kBlock);
#pragma omp for schedule(static)
      for (int64_t s = 0; s < slices; ++s) {
        float* slice = staging + s * g.out * ld;
        for (int64_t t = 0; t < taps; ++t) {
          BFloat16* group_panel = panel;
          for (size_t gi = chunk.begin; gi < chunk.end; ++gi) {
            PackPixelPairs(x, source + t * pixels, groups[gi], g.c, s * kBlock, group_panel);
            group_panel += groups[gi].padded * kBlock;
          }
          TapSlice(transposed, chunk, g, panel, ld, slice + t * kBlock);
        }
        if (last) StagingToWeights(slice, index, g, s * kBlock, gw);
      }
    }
  }
}

}  // namespace cpu
}  // namespace ddp
