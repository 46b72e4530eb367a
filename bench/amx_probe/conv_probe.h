// What the convolution-primitive probes (bench/amx_probe/bwd_data_order.cc, bwd_weights_order.cc) share:
// the shape of a 3x3, padding-1 convolution and the forward primitive descriptor oneDNN's backward
// primitives take as their hint, as the engine creates it (bf16 NHWC input, float32 NHWC output).
// Header-only.
#ifndef DDP_BENCH_AMX_PROBE_CONV_PROBE_H_
#define DDP_BENCH_AMX_PROBE_CONV_PROBE_H_

#include <oneapi/dnnl/dnnl.hpp>

namespace amx_probe {

// A 3x3, padding-1 convolution: batch n, c input and out output channels, h x w input maps, stride.
struct ConvShape {
  const char* name;
  long n, c, out, h, w, stride;
  long oh() const { return (h - 1) / stride + 1; }
  long ow() const { return (w - 1) / stride + 1; }
  dnnl::memory::dims src() const { return {n, c, h, w}; }
  dnnl::memory::dims weights() const { return {out, c, 3, 3}; }
  dnnl::memory::dims dst() const { return {n, out, oh(), ow()}; }
  dnnl::memory::dims strides() const { return {stride, stride}; }
  dnnl::memory::dims padding() const { return {1, 1}; }
};

// The training forward's primitive descriptor for s: bf16 NHWC input, bf16 weights in oneDNN's layout,
// float32 NHWC output.
inline dnnl::convolution_forward::primitive_desc ForwardHint(const ConvShape& s, const dnnl::engine& engine) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  return dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                      dnnl::memory::desc(s.src(), dt::bf16, tag::acdb),
                                      dnnl::memory::desc(s.weights(), dt::bf16, tag::any),
                                      dnnl::memory::desc(s.dst(), dt::f32, tag::acdb), s.strides(),
                                      s.padding(), s.padding()),
      engine);
}

}  // namespace amx_probe

#endif  // DDP_BENCH_AMX_PROBE_CONV_PROBE_H_
