// CPU kernels of Conv2d (im2col + one GEMM per group of images, col2im for the input gradient) and the
// shape checks, shared by Conv2d (tensor/ops_conv.cc) and the convolution fused with ReLU and MaxPool2d
// (tensor/ops_conv_pool.cc). Internal to the tensor floor. The entry points below run oneDNN's
// convolution primitives instead of im2col where Note [Conv2d kernel choice] (tensor/conv_onednn.h) says so;
// their contracts hold for both kernels.
//
// Note [Conv2d image groups]
// With K = c*kh*kw rows and P = oh*ow output positions per image, a group of G images is unfolded
// into col [K, G*P] (image g occupies columns [g*P, (g+1)*P)) and multiplied in one GEMM:
//   forward       tmp[out, G*P] = w[out, K] * col[K, G*P]       (then scattered to [G, out, P] + bias)
//   grad weight   gw[out, K]   += g[out, G*P] * col^T
//   grad input    gcol[K, G*P]  = w^T * g[out, G*P]             (then col2im, accumulating)
// For G == 1 the GEMM reads and writes the image's [out, P] slice of the output or gradient directly,
// with no scatter. A larger G gives the GEMM a wider N (better kernel efficiency when P is small) at
// the price of the scatter/gather copies; ImagesPerGroup picks G so the col buffer stays within 1 MiB
// (L2-resident), or within the weight matrix's size when that is larger (each group streams the weights
// again: a deep layer's 9 MiB of weights at P = 16 would otherwise pass through the GEMM 21 times per
// batch of 64). The col buffers are per-thread scratch reused across calls (class Scratch), never
// allocated per image.
#ifndef DDP_TENSOR_CONV_KERNELS_H_
#define DDP_TENSOR_CONV_KERNELS_H_

#include <cstdint>
#include <functional>

#include "tensor/tensor.h"

namespace ddp {
namespace cpu {

// The sizes of one convolution; K rows of col and P output positions per image.
struct ConvGeometry {
  int64_t n, c, h, w;   // input
  int64_t out, kh, kw;  // weight
  int64_t stride, padding;
  int64_t oh, ow;  // output spatial size
  // Activations (x, y and their gradients) lie channels-last, NHWC (Note [Channels-last activations],
  // tensor/memory_format.h), for the oneDNN passes of tensor/conv_onednn.h; NCHW otherwise.
  bool channels_last = false;
  int64_t K() const { return c * kh * kw; }
  int64_t P() const { return oh * ow; }
};

// The geometry of Conv2d(x, w, b, stride, padding) (b may be undefined); dies through DDP_CHECK naming
// the shapes when they do not fit together.
ConvGeometry CheckConvShapes(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride,
                             int64_t padding);

// Receives the convolution of images [first, first + count) as out [g.out, ld = count * P]: image i's
// channel o at out + o * ld + i * P, with the bias added when `bias_added` (a group of one image is
// computed with its bias; a larger group without it, the receiver adds it; Note [Conv2d image groups]).
using GroupOutputFn =
    std::function<void(int64_t first, int64_t count, float* out, int64_t ld, bool bias_added)>;

// Runs the forward GEMM of each group of images of x [n, c, h, w] with w [out, K] and b [out] (null: no
// bias) and hands the group's output to `consume`, in image order. With `direct` ([n, out, P]) a group of
// one image is computed there in place (at direct + first * out * P); otherwise in per-thread scratch,
// valid during the call.
void ConvForwardGroups(const float* x, const float* w, const float* b, const ConvGeometry& g, float* direct,
                       const GroupOutputFn& consume);
// The same with bf16 x and w multiplied with float32 accumulation (mixed precision, tensor/autocast.h):
// im2col unfolds bf16 values and the GEMMs are tensor/cpu_gemm_bf16.h's; outputs stay float32.
void ConvForwardGroups(const BFloat16* x, const BFloat16* w, const float* b, const ConvGeometry& g,
                       float* direct, const GroupOutputFn& consume);

// The images per GEMM group G for geometry g (Note [Conv2d image groups]; at least 1, at most g.n).
int64_t ImagesPerGroup(const ConvGeometry& g);

// y [n, out, oh, ow] = conv(x, w) (+ b when not null).
void ConvForward(const float* x, const float* w, const float* b, const ConvGeometry& g, float* y);
void ConvForward(const BFloat16* x, const BFloat16* w, const float* b, const ConvGeometry& g, float* y);

// The output gradient of images [first, first + count) in the layout of GroupOutputFn: written into
// `scratch` ([g.out, count * P] floats) and returned, or returned where it already lies in that layout.
using GroupGradientFn = std::function<const float*(int64_t first, int64_t count, float* scratch)>;

// The GroupGradientFn of a contiguous output gradient gy [n, out, P] (a group of one image is read in
// place, larger groups are gathered).
GroupGradientFn DenseGradient(const float* gy, const ConvGeometry& g);

struct ConvGrads {
  float* gx;  // null when not needed; overwritten (need not be initialised)
  float* gw;  // null when not needed
  float* gb;  // null when not needed
};

// The gradient tensors a convolution's backward fills, on `device`: gx (uninitialised on the CPU, where
// ConvBackward overwrites it; zero-filled on a GPU, whose backward accumulates into it), gw and gb, each
// undefined when its input needs none.
struct ConvGradTensors {
  Tensor gx, gw, gb;
  ConvGrads Pointers() const;  // their data, null where undefined (CPU)
};
ConvGradTensors NewConvGrads(const Tensor& x, const Tensor& w, const ConvGeometry& g, bool need_x,
                             bool need_w, bool need_b, Device device);

// The backward of ConvForward: the requested gradients (each overwritten) from
// the output gradient that `gradient` gives group by group.
void ConvBackward(const float* x, const float* w, const ConvGeometry& g, const GroupGradientFn& gradient,
                  ConvGrads grads);
// The same with bf16 x and w: the output gradient is rounded to bf16 group by group and the GEMMs are
// bf16 with float32 accumulation; the gradients stay float32.
void ConvBackward(const BFloat16* x, const BFloat16* w, const ConvGeometry& g,
                  const GroupGradientFn& gradient, ConvGrads grads);

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CONV_KERNELS_H_
