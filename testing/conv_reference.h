// A convolution computed the slow, exact way, for checking the fast kernels: every product of a 2-D
// convolution's output, input gradient and weight gradient summed in double precision.
#ifndef DDP_TESTING_CONV_REFERENCE_H_
#define DDP_TESTING_CONV_REFERENCE_H_

#include <vector>

#include "tensor/conv_kernels.h"

namespace ddp {

// The exact results of one convolution of geometry g (NCHW, no bias; g.channels_last is ignored).
struct ConvReference {
  std::vector<double> y;   // [n, out, oh, ow]: conv(x, w)
  std::vector<double> gx;  // [n, c, h, w]: the input gradient for the output gradient gy
  std::vector<double> gw;  // [out, c, kh, kw]: the weight gradient for gy
};

// x [n, c, h, w], w [out, c, kh, kw] and gy [n, out, oh, ow], NCHW, with g's stride and zero padding.
// REQUIRES: the vectors hold exactly those sizes. Cost: n * out * c * kh * kw * oh * ow multiply-adds.
ConvReference DirectConvolution(const std::vector<float>& x, const std::vector<float>& w,
                                const std::vector<float>& gy, const cpu::ConvGeometry& g);

}  // namespace ddp

#endif  // DDP_TESTING_CONV_REFERENCE_H_
