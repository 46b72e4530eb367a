// MaxPool2d on either device: forward records, per output element, the argmax's offset inside its
// [h, w] plane (int32, in a buffer on the input's device); backward scatters the output gradient to
// those offsets. Only the two kernel calls branch on the device.
//
// Note [ReLU then MaxPool2d in one pass]
// MaxPool2d(Relu(x)) is the CNN's usual pair, and computing it as written costs two passes over the
// full-size activation in forward (Relu's output, then the pool's read of it) and two in backward (the
// pool's scatter, then Relu's mask). MaxPool2dOfRelu takes the max over each window with the running
// best starting at 0 instead of the window's first value: a value wins when it is greater than the best
// so far, so the result is Relu's 0 when no value of the window is positive, and otherwise the first
// positive maximum in scan order, the window Relu-then-pool would pick. Relu sends no gradient where its
// input is not positive (and maps NaN to 0, so a NaN never wins); when nothing won, the window's index
// gets the sign bit (kNoGradient) and backward adds 0 there, so values and gradients are bit for bit those
// of the unfused pair. nn::Sequential calls it for a ReLU followed by a MaxPool2d (nn/layers.h). On CUDA it
// runs as the unfused pair.
#include <vector>

#include "tensor/function_node.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"
#include "tensor/pool_kernels.h"
#include "tensor/storage.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/op_util.h"
#endif

namespace ddp {
namespace {

using cpu::PoolGeometry;

// y and index (the argmax's offset in its plane) for contiguous x [planes, h, w], on x's device; with
// `relu` of Relu(x), on the CPU only.
void MaxPoolForwardInto(const Tensor& x, const PoolGeometry& g, bool relu, const Tensor& y, int32_t* index) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
#ifdef DDP_WITH_CUDA
  if (x.device().is_cuda()) {
    DDP_CHECK(!relu) << "MaxPool2dOfRelu runs as Relu then MaxPool2d on CUDA";
    cuda::DeviceGuard guard(x.device().index);
    DDP_CUDA_CHECK(cuda::kernels::MaxPoolForward(px, py, index, g.planes, g.h, g.w, g.kernel, g.stride, g.oh, g.ow,
                                                 cuda::StreamOf(x)));
    return;
  }
#endif
  const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
#pragma omp parallel for if (g.planes * in_plane > (1 << 16))
  for (int64_t p = 0; p < g.planes; ++p) {
    cpu::MaxPoolPlane(px + p * in_plane, g, relu, py + p * out_plane, index + p * out_plane);
  }
}

// gx = 0 except gx[index] += gy, plane by plane, for contiguous gy, on gy's device; an index with
// kNoGradient set gets 0 (CPU only).
void MaxPoolBackwardInto(const Tensor& gy, const int32_t* index, const PoolGeometry& g, const Tensor& gx) {
  const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
  const float* pgy = gy.data<float>();
  float* pgx = gx.data<float>();
#ifdef DDP_WITH_CUDA
  if (gy.device().is_cuda()) {
    cuda::DeviceGuard guard(gy.device().index);
    DDP_CUDA_CHECK(cuda::kernels::MaxPoolBackward(pgy, index, pgx, g.planes, in_plane, out_plane, cuda::StreamOf(gy)));
    return;
  }
#endif
#pragma omp parallel for if (g.planes * in_plane > (1 << 16))
  for (int64_t p = 0; p < g.planes; ++p) {
    cpu::MaxPoolBackwardPlane(pgy + p * out_plane, index + p * out_plane, g, pgx + p * in_plane);
  }
}

// MaxPool2d, of Relu(x) with `relu` (CPU only), recorded under `name`.
Tensor MaxPool(const char* name, bool relu, const Tensor& x, int64_t kernel, int64_t stride) {
  RequireFloatOnOneDevice(name, {&x});
  const PoolGeometry g = cpu::CheckPoolShapes(x.shape(), kernel, stride == 0 ? kernel : stride);
  Tensor xc = Contiguous(x.Detach());
  Tensor out = Tensor::Empty({x.shape()[0], x.shape()[1], g.oh, g.ow}, DType::kFloat32, x.device());
  Storage index = NewStorage(static_cast<size_t>(out.numel()) * sizeof(int32_t), x.device());
  MaxPoolForwardInto(xc, g, relu, out, static_cast<int32_t*>(index->data()));
  const Shape in_shape = x.shape();
  return RecordOp(out, relu ? "MaxPool2dOfReluBackward" : "MaxPool2dBackward", {&x},
                  [index, in_shape, g](const Tensor& gy) {
                    Tensor gx = Tensor::Empty(in_shape, DType::kFloat32, gy.device());
                    MaxPoolBackwardInto(Contiguous(gy), static_cast<const int32_t*>(index->data()), g, gx);
                    return std::vector<Tensor>{gx};
                  });
}

}  // namespace

Tensor MaxPool2d(const Tensor& x, int64_t kernel, int64_t stride) {
  return MaxPool("MaxPool2d", /*relu=*/false, x, kernel, stride);
}

Tensor MaxPool2dOfRelu(const Tensor& x, int64_t kernel, int64_t stride) {
  if (!x.device().is_cpu()) return MaxPool2d(Relu(x), kernel, stride);
  return MaxPool("MaxPool2dOfRelu", /*relu=*/true, x, kernel, stride);
}

}  // namespace ddp
