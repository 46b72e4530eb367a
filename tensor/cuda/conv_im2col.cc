// Conv2d's CUDA kernels (contracts: cuda_ops.h): im2col + one cuBLAS GEMM per group of images, as the CPU's
// (Note [Conv2d image groups] in tensor/conv_kernels.h) with a GPU-sized group.
#include <algorithm>

#include "tensor/cuda/cuda_ops.h"
#include "tensor/cuda/op_util.h"
#include "tensor/ops.h"

namespace ddp {
namespace cuda {

namespace {

// Images per GEMM: as many as keep col [K, G*P] within 256 MiB (one wide GEMM per group).
int64_t ImagesPerGroup(const kernels::ConvShape& g) {
  const int64_t per_image = std::max<int64_t>(g.c * g.kh * g.kw * g.oh * g.ow, 1);
  const int64_t budget = (int64_t{256} << 20) / static_cast<int64_t>(sizeof(float));
  return std::max<int64_t>(1, std::min<int64_t>(g.n, budget / per_image));
}

}  // namespace

void Conv2dForward(const Tensor& x, const Tensor& w, const Tensor& b, const kernels::ConvShape& g, const Tensor& y) {
  const int device = x.device().index;
  const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, group = ImagesPerGroup(g);
  DeviceGuard guard(device);
  cudaStream_t stream = StreamOf(x);
  Tensor col = Tensor::Empty({K * P * std::min(group, g.n)}, DType::kFloat32, x.device());
  Tensor tmp = Tensor::Empty({g.out * P * std::min(group, g.n)}, DType::kFloat32, x.device());
  for (int64_t first = 0; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first), ld = count * P;
    DDP_CUDA_CHECK(kernels::Im2Col(x.data<float>(), g, first, count, col.data<float>(), stream));
    Gemm(device, false, false, g.out, ld, K, 1.0f, w.data<float>(), K, col.data<float>(), ld, 0.0f,
         tmp.data<float>(), ld);
    DDP_CUDA_CHECK(kernels::SwapOuterDims(tmp.data<float>(), y.data<float>() + first * g.out * P, g.out, count, P,
                                          b.defined() ? b.data<float>() : nullptr, stream));
  }
}

void Conv2dBackward(const Tensor& x, const Tensor& w, const Tensor& gy, const kernels::ConvShape& g,
                    const Tensor& gx, const Tensor& gw, const Tensor& gb) {
  if (gb.defined()) ddp::CopyInPlace(gb, ddp::Sum(gy.Detach(), {0, 2, 3}, false));
  if (!gx.defined() && !gw.defined()) return;
  const int device = gy.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = StreamOf(gy);
  const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, group = ImagesPerGroup(g);
  const int64_t max_cols = P * std::max<int64_t>(std::min(group, g.n), 1);
  Tensor col = Tensor::Empty({K * max_cols}, DType::kFloat32, gy.device());
  Tensor gathered = Tensor::Empty({g.out * max_cols}, DType::kFloat32, gy.device());
  if (gw.defined()) ddp::FillInPlace(gw, 0.0f);
  for (int64_t first = 0; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first), ld = count * P;
    // gy [count, out, P] -> [out, count * P]
    DDP_CUDA_CHECK(kernels::SwapOuterDims(gy.data<float>() + first * g.out * P, gathered.data<float>(), count, g.out,
                                          P, nullptr, stream));
    if (gw.defined()) {
      DDP_CUDA_CHECK(kernels::Im2Col(x.data<float>(), g, first, count, col.data<float>(), stream));
      Gemm(device, false, true, g.out, K, ld, 1.0f, gathered.data<float>(), ld, col.data<float>(), ld, 1.0f,
           gw.data<float>(), K);
    }
    if (gx.defined()) {
      Gemm(device, true, false, K, ld, g.out, 1.0f, w.data<float>(), K, gathered.data<float>(), ld, 0.0f,
           col.data<float>(), ld);
      DDP_CUDA_CHECK(kernels::Col2Im(col.data<float>(), g, first, count, gx.data<float>(), stream));
    }
  }
}

// The same algorithm with 16-bit operands (autocast): col is built in x's dtype, the output gradient is
// gathered in float32 and rounded once per group.
void Conv2dForwardLowPrecision(const Tensor& x, const Tensor& w, const Tensor& b, const kernels::ConvShape& g,
                               const Tensor& y) {
  const int device = x.device().index;
  const DType dtype = x.dtype();
  const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, group = ImagesPerGroup(g);
  DeviceGuard guard(device);
  cudaStream_t stream = StreamOf(x);
  Tensor col = Tensor::Empty({K * P * std::min(group, g.n)}, dtype, x.device());
  Tensor tmp = Tensor::Empty({g.out * P * std::min(group, g.n)}, DType::kFloat32, x.device());
  const auto* xs = static_cast<const uint16_t*>(x.raw_data());
  auto* cols = static_cast<uint16_t*>(col.raw_data());
  for (int64_t first = 0; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first), ld = count * P;
    DDP_CUDA_CHECK(kernels::Im2Col16(xs, g, first, count, cols, stream));
    GemmLowPrecision(device, dtype, false, false, g.out, ld, K, 1.0f, w.raw_data(), K, cols, ld, 0.0f,
                     tmp.data<float>(), ld);
    DDP_CUDA_CHECK(kernels::SwapOuterDims(tmp.data<float>(), y.data<float>() + first * g.out * P, g.out, count, P,
                                          b.defined() ? b.data<float>() : nullptr, stream));
  }
}

void Conv2dBackwardLowPrecision(const Tensor& x, const Tensor& w, const Tensor& gy, const kernels::ConvShape& g,
                                const Tensor& gx, const Tensor& gw, const Tensor& gb) {
  if (gb.defined()) ddp::CopyInPlace(gb, ddp::Sum(gy.Detach(), {0, 2, 3}, false));
  if (!gx.defined() && !gw.defined()) return;
  const int device = gy.device().index;
  const DType dtype = x.dtype();
  DeviceGuard guard(device);
  cudaStream_t stream = StreamOf(gy);
  const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow, group = ImagesPerGroup(g);
  const int64_t max_cols = P * std::max<int64_t>(std::min(group, g.n), 1);
  Tensor col16 = Tensor::Empty({K * max_cols}, dtype, gy.device());
  Tensor col = gx.defined() ? Tensor::Empty({K * max_cols}, DType::kFloat32, gy.device()) : Tensor();
  Tensor gathered = Tensor::Empty({g.out * max_cols}, DType::kFloat32, gy.device());
  Tensor gathered16 = Tensor::Empty({g.out * max_cols}, dtype, gy.device());
  const auto* xs = static_cast<const uint16_t*>(x.raw_data());
  auto* cols16 = static_cast<uint16_t*>(col16.raw_data());
  auto* g16 = static_cast<uint16_t*>(gathered16.raw_data());
  if (gw.defined()) ddp::FillInPlace(gw, 0.0f);
  for (int64_t first = 0; first < g.n; first += group) {
    const int64_t count = std::min(group, g.n - first), ld = count * P;
    // gy [count, out, P] -> [out, count * P], rounded
    DDP_CUDA_CHECK(kernels::SwapOuterDims(gy.data<float>() + first * g.out * P, gathered.data<float>(), count, g.out,
                                          P, nullptr, stream));
    DDP_CUDA_CHECK(kernels::RoundToLowPrecision(gathered.data<float>(), g16,
                                                static_cast<kernels::ElementType>(dtype), g.out * ld, stream));
    if (gw.defined()) {
      DDP_CUDA_CHECK(kernels::Im2Col16(xs, g, first, count, cols16, stream));
      GemmLowPrecision(device, dtype, false, true, g.out, K, ld, 1.0f, g16, ld, cols16, ld, 1.0f, gw.data<float>(),
                       K);
    }
    if (gx.defined()) {
      GemmLowPrecision(device, dtype, true, false, K, ld, g.out, 1.0f, w.raw_data(), K, g16, ld, 0.0f,
                       col.data<float>(), ld);
      DDP_CUDA_CHECK(kernels::Col2Im(col.data<float>(), g, first, count, gx.data<float>(), stream));
    }
  }
}

}  // namespace cuda
}  // namespace ddp
