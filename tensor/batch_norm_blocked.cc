// Training-mode BatchNorm in channel blocks (contracts: tensor/batch_norm_blocked.h).
//
// Note [BatchNorm in channel blocks]
// A training BatchNorm reads its input three times in forward (Σx, then Σ(x - mean)^2, then the output
// pass) and its input and output gradient twice in backward (the sums, then the input gradient). At
// ResNet-18's sizes a layer1 activation is 12.8 MB at batch 64, larger than a core's L2 cache, so pass
// by pass over the whole tensor every pass comes from memory; with small images (7x7, 4x4) the rows of
// one channel are also far apart (one cache line each at layer4), so a channel-by-channel pass waits on
// memory row by row. Here every pass runs over one block of channels before the next block starts,
// walking the block image by image (each image's rows of the block are contiguous); blocks small enough
// for L2 let the later passes find the block in cache, one block per thread makes every pass one stream
// (which of the two is faster depends on the CPU: Note [BatchNorm block size by measurement]). Each channel
// still folds its rows into its double totals in order i = 0, 1, ... with the row functions of
// tensor/batch_norm_rows.h, and every statistic and output element is computed with the same functions, so
// the numbers are the whole-tensor kernels' bit for bit. Only a batch normalised on one process can run this
// way: a process group sums the statistics of all blocks between the passes.
#include "tensor/batch_norm_blocked.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "tensor/batch_norm_block_size.h"
#include "tensor/batch_norm_channels_last.h"
#include "tensor/batch_norm_rows.h"
#include "tensor/bf16_convert.h"

namespace ddp {
namespace {

constexpr int64_t kParallelElements = int64_t{1} << 16;  // as the whole-tensor kernels

// Runs f(c0, c1) for the channel blocks [c0, c1) of `s`, `per_block` channels each (the last may have
// fewer), blocks in parallel.
template <typename F>
void ForEachChannelBlock(const BatchNormShape& s, int64_t per_block, F f) {
  const int64_t blocks = (s.c + per_block - 1) / per_block;
#pragma omp parallel for schedule(dynamic) if (s.n * s.c * s.inner > kParallelElements)
  for (int64_t b = 0; b < blocks; ++b) f(b * per_block, std::min(s.c, (b + 1) * per_block));
}

// Runs f(ch, offset) for the rows of channels [c0, c1), image by image (offset: the row's first element).
template <typename F>
void ForEachRowOfBlock(const BatchNormShape& s, int64_t c0, int64_t c1, F f) {
  for (int64_t i = 0; i < s.n; ++i) {
    for (int64_t ch = c0; ch < c1; ++ch) f(ch, (i * s.c + ch) * s.inner);
  }
}

}  // namespace

BlockedForward BlockedTrainingForward(const Tensor& x, float eps, const Tensor& weight, const Tensor& bias,
                                      bool relu, const Tensor& residual, const Tensor& bf16_copy,
                                      ReluMaskBits* relu_mask) {
  DDP_CHECK(x.device().is_cpu() && x.is_contiguous())
      << "BlockedTrainingForward: x must be contiguous on the CPU";
  DDP_CHECK(relu || (!residual.defined() && !bf16_copy.defined() && relu_mask == nullptr))
      << "BlockedTrainingForward: a residual, bf16 copy or ReLU mask needs relu";
  DDP_CHECK(!bf16_copy.defined() || (bf16_copy.dtype() == DType::kBFloat16 &&
                                     bf16_copy.shape() == x.shape() && bf16_copy.is_contiguous()))
      << "BlockedTrainingForward: the bf16 copy must be a contiguous bfloat16 tensor of shape "
      << ShapeToString(x.shape());
  const BatchNormShape s = BatchNormShapeOf(x);
  DDP_CHECK(s.count() > 1) << "BatchNorm: expected more than 1 value per channel when training, got input "
                           << ShapeToString(x.shape());
  BlockedForward result;
  BatchNormStats& stats = result.stats;
  stats.count = s.count();
  stats.mean = Tensor::Empty({s.c}, DType::kFloat32);
  stats.var = Tensor::Empty({s.c}, DType::kFloat32);
  stats.invstd = Tensor::Empty({s.c}, DType::kFloat32);
  result.y = Tensor::Empty(x.shape(), DType::kFloat32);
  const float* px = x.data<float>();
  const float* pr = residual.defined() ? residual.data<float>() : nullptr;
  float* pmean = stats.mean.data<float>();
  float* pvar = stats.var.data<float>();
  float* pinvstd = stats.invstd.data<float>();
  float* py = result.y.data<float>();
  BFloat16* pb = bf16_copy.defined() ? bf16_copy.data<BFloat16>() : nullptr;
  uint8_t* pmask = SizeReluMask(relu_mask, s);
  if (s.inner == 1) {
    // Note [BatchNorm over channels in lanes].
    batch_norm_channels_last::TrainingForward(s.n, s.c, eps, weight, bias, relu,
                                              {px, pr, pmean, pvar, pinvstd, py, pb, pmask});
    return result;
  }
  const int64_t row_bytes = (s.inner + 7) / 8;
  const BatchNormBlockChoice block(/*backward=*/false, s);
  ForEachChannelBlock(s, block.channels_per_block(), [&](int64_t c0, int64_t c1) {
    std::vector<double> totals(c1 - c0, 0.0);
    ForEachRowOfBlock(s, c0, c1, [&](int64_t ch, int64_t base) {
      totals[ch - c0] = batch_norm_rows::AddRowSum(totals[ch - c0], px + base, s.inner);
    });
    for (int64_t ch = c0; ch < c1; ++ch) {
      pmean[ch] = batch_norm_rows::DividedByCount(static_cast<float>(totals[ch - c0]), s.count());
    }
    std::fill(totals.begin(), totals.end(), 0.0);
    ForEachRowOfBlock(s, c0, c1, [&](int64_t ch, int64_t base) {
      totals[ch - c0] =
          batch_norm_rows::AddRowSquaredDeviations(totals[ch - c0], px + base, s.inner, pmean[ch]);
    });
    std::vector<batch_norm_rows::AffineCoefficients> affine(c1 - c0);
    for (int64_t ch = c0; ch < c1; ++ch) {
      pvar[ch] = batch_norm_rows::DividedByCount(static_cast<float>(totals[ch - c0]), s.count());
      pinvstd[ch] = batch_norm_rows::InverseStdOf(pvar[ch], eps);
      affine[ch - c0] = batch_norm_rows::AffineOf(pmean[ch], pinvstd[ch], ChannelValueOr(weight, ch, 1.0f),
                                                  ChannelValueOr(bias, ch, 0.0f));
    }
    ForEachRowOfBlock(s, c0, c1, [&](int64_t ch, int64_t base) {
      if (!relu) {
        batch_norm_rows::NormalizeRow(px + base, s.inner, affine[ch - c0], py + base);
        return;
      }
      batch_norm_rows::NormalizeAddReluRow(px + base, pr != nullptr ? pr + base : nullptr, s.inner,
                                           affine[ch - c0], py + base, pb != nullptr ? pb + base : nullptr,
                                           pmask != nullptr ? pmask + base / s.inner * row_bytes : nullptr);
    });
  });
  return result;
}

void BlockedTrainingBackward(const Tensor& gy, const ReluMaskBits* relu_mask, const Tensor& x,
                             const BatchNormStats& stats, const Tensor& weight, const Tensor& masked,
                             const Tensor& sums, const Tensor& gx, const Tensor& gx_copy) {
  DDP_CHECK(x.device().is_cpu()) << "BlockedTrainingBackward runs on the CPU only";
  DDP_CHECK(!gx_copy.defined() ||
            (gx_copy.dtype() == DType::kBFloat16 && gx_copy.is_contiguous() && gx_copy.shape() == x.shape()))
      << "BlockedTrainingBackward: the input gradient's bf16 copy must be a contiguous bfloat16 tensor of "
      << ShapeToString(x.shape());
  const BatchNormShape s = BatchNormShapeOf(x);
  DDP_CHECK(relu_mask == nullptr ||
            (relu_mask->row_bytes == (s.inner + 7) / 8 &&
             static_cast<int64_t>(relu_mask->bits.size()) == s.n * s.c * relu_mask->row_bytes))
      << "BlockedTrainingBackward: the ReLU mask does not have the shape of " << ShapeToString(x.shape());
  const float* pg = gy.data<float>();
  const float* px = x.data<float>();
  const float* pmean = stats.mean.data<float>();
  const float* pinvstd = stats.invstd.data<float>();
  float* pmasked = relu_mask != nullptr && masked.defined() ? masked.data<float>() : nullptr;
  float* sum_g = sums.data<float>();
  float* sum_gx = sum_g + s.c;
  float* pgx = gx.data<float>();
  if (s.inner == 1) {
    // Note [BatchNorm over channels in lanes].
    batch_norm_channels_last::TrainingBackward(
        s.n, s.c, weight,
        {pg, relu_mask != nullptr ? relu_mask->bits.data() : nullptr, px, pmean, pinvstd, pmasked, sum_g,
         sum_gx, pgx, gx_copy.defined() ? gx_copy.data<BFloat16>() : nullptr});
    return;
  }
  const BatchNormBlockChoice block(/*backward=*/true, s);
  ForEachChannelBlock(s, block.channels_per_block(), [&](int64_t c0, int64_t c1) {
    std::vector<batch_norm_rows::BackwardTotals> totals(c1 - c0);
    thread_local std::vector<uint32_t> lanes;  // a row's mask as lanes, reused across calls
    if (relu_mask != nullptr) lanes.resize(static_cast<size_t>(8 * relu_mask->row_bytes));
    // The row's mask as lanes, when there is a mask.
    auto expand_mask = [&](int64_t base) -> const uint32_t* {
      if (relu_mask == nullptr) return nullptr;
      const int64_t row = base / std::max<int64_t>(s.inner, 1);
      batch_norm_rows::ExpandRowMask(relu_mask->bits.data() + row * relu_mask->row_bytes,
                                     relu_mask->row_bytes, lanes.data());
      return lanes.data();
    };
    ForEachRowOfBlock(s, c0, c1, [&](int64_t ch, int64_t base) {
      batch_norm_rows::AddRowBackwardSums(pg + base, expand_mask(base),
                                          pmasked != nullptr ? pmasked + base : nullptr, px + base, s.inner,
                                          pmean[ch], totals[ch - c0]);
    });
    std::vector<batch_norm_rows::InputGradCoefficients> coefficients(c1 - c0);
    for (int64_t ch = c0; ch < c1; ++ch) {
      sum_g[ch] = static_cast<float>(totals[ch - c0].g);
      sum_gx[ch] = static_cast<float>(totals[ch - c0].gx);
      coefficients[ch - c0] = batch_norm_rows::InputGradOf(pinvstd[ch], ChannelValueOr(weight, ch, 1.0f),
                                                           sum_g[ch], sum_gx[ch], stats.count, true);
    }
    // The input gradient of the masked gradient: read back where it was stored, else masked again.
    ForEachRowOfBlock(s, c0, c1, [&](int64_t ch, int64_t base) {
      if (relu_mask != nullptr && pmasked == nullptr) {
        batch_norm_rows::MaskedInputGradRow(pg + base, expand_mask(base), px + base, s.inner,
                                            coefficients[ch - c0], pmean[ch], pgx + base);
        return;
      }
      batch_norm_rows::InputGradRow(pmasked != nullptr ? pmasked + base : pg + base, px + base, s.inner,
                                    coefficients[ch - c0], pmean[ch], pgx + base);
    });
  });
  if (gx_copy.defined()) cpu::FloatToBFloat16Array(pgx, gx_copy.data<BFloat16>(), x.numel());
}

}  // namespace ddp
