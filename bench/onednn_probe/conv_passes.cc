// Times oneDNN's convolution primitives at ResNet-18's shapes on 28x28 images (nn/resnet.h), batch 64,
// one thread: forward, backward-data and backward-weights, each with the layouts oneDNN picks (`any`), as
// the engine creates them (tensor/conv_onednn.cc): bf16 operands with float32 outputs and gradients, or
// float32 throughout. Builds against oneDNN 2.x or 3.x (their descriptor APIs differ). Prints each
// shape's median over 7 timed runs after one, oneDNN's kernel name, and the per-step total (each shape
// times its uses in the network).
//
//   conv_passes bf16|f32 [direct|winograd]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DataType = memory::data_type;

struct Shape {
  const char* name;
  int in, out, size, kernel, stride, uses;
};

constexpr Shape kShapes[] = {
    {"conv1 1->64 3x3 28", 1, 64, 28, 3, 1, 1},    {"l1 64->64 3x3 28", 64, 64, 28, 3, 1, 4},
    {"l2a 64->128 3x3 s2", 64, 128, 28, 3, 2, 1},  {"l2 128->128 3x3 14", 128, 128, 14, 3, 1, 3},
    {"l2ds 64->128 1x1 s2", 64, 128, 28, 1, 2, 1}, {"l3a 128->256 3x3 s2", 128, 256, 14, 3, 2, 1},
    {"l3 256->256 3x3 7", 256, 256, 7, 3, 1, 3},   {"l3ds 128->256 1x1 s2", 128, 256, 14, 1, 2, 1},
    {"l4a 256->512 3x3 s2", 256, 512, 7, 3, 2, 1}, {"l4 512->512 3x3 4", 512, 512, 4, 3, 1, 3},
    {"l4ds 256->512 1x1 s2", 256, 512, 7, 1, 2, 1}};

const dnnl::engine& Engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Median milliseconds of 7 runs of f after one untimed run.
template <typename F>
double MedianMs(F f) {
  f();
  std::vector<double> ms;
  for (int i = 0; i < 7; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[3];
}

memory Filled(const memory::desc& desc) {
  memory m(desc, Engine());
  std::memset(m.get_data_handle(), 0x11, desc.get_size());  // small finite values in bf16 and float32
  return m;
}

struct Times {
  double forward, data, weights;
};

Times TimeShape(const Shape& s, DataType operand, dnnl::algorithm algorithm) {
  const int n = 64, padding = s.kernel / 2, out_size = (s.size + 2 * padding - s.kernel) / s.stride + 1;
  const memory::dims src{n, s.in, s.size, s.size}, weights{s.out, s.in, s.kernel, s.kernel},
      dst{n, s.out, out_size, out_size}, strides{s.stride, s.stride}, pad{padding, padding};
  const memory::desc src_op(src, operand, Tag::any), weights_op(weights, operand, Tag::any),
      dst_op(dst, operand, Tag::any), src_f32(src, DataType::f32, Tag::any),
      weights_f32(weights, DataType::f32, Tag::any), dst_f32(dst, DataType::f32, Tag::any);
  const auto& e = Engine();
  const auto fwd_prop = dnnl::prop_kind::forward_training;
#if DNNL_VERSION_MAJOR >= 3
  const dnnl::convolution_forward::primitive_desc fwd(e, fwd_prop, algorithm, src_op, weights_op, dst_f32,
                                                      strides, pad, pad);
  const dnnl::convolution_backward_data::primitive_desc bwd_data(e, algorithm, src_f32, weights_op, dst_op,
                                                                 strides, pad, pad, fwd);
  const dnnl::convolution_backward_weights::primitive_desc bwd_weights(e, algorithm, src_op, weights_f32,
                                                                       dst_op, strides, pad, pad, fwd);
#else
  const dnnl::convolution_forward::primitive_desc fwd(
      dnnl::convolution_forward::desc(fwd_prop, algorithm, src_op, weights_op, dst_f32, strides, pad, pad),
      e);
  const dnnl::convolution_backward_data::primitive_desc bwd_data(
      dnnl::convolution_backward_data::desc(algorithm, src_f32, weights_op, dst_op, strides, pad, pad), e,
      fwd);
  const dnnl::convolution_backward_weights::primitive_desc bwd_weights(
      dnnl::convolution_backward_weights::desc(algorithm, src_op, weights_f32, dst_op, strides, pad, pad), e,
      fwd);
#endif
  dnnl::stream stream(e);
  const dnnl::convolution_forward fwd_p(fwd);
  const dnnl::convolution_backward_data data_p(bwd_data);
  const dnnl::convolution_backward_weights weights_p(bwd_weights);
  memory x = Filled(fwd.src_desc()), w = Filled(fwd.weights_desc()), y = Filled(fwd.dst_desc());
  memory gy = Filled(bwd_data.diff_dst_desc()), wd = Filled(bwd_data.weights_desc()),
         gx = Filled(bwd_data.diff_src_desc());
  memory xw = Filled(bwd_weights.src_desc()), gyw = Filled(bwd_weights.diff_dst_desc()),
         gw = Filled(bwd_weights.diff_weights_desc());
  Times t;
  t.forward = MedianMs([&] {
    fwd_p.execute(stream, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}});
    stream.wait();
  });
  t.data = MedianMs([&] {
    data_p.execute(stream, {{DNNL_ARG_DIFF_DST, gy}, {DNNL_ARG_WEIGHTS, wd}, {DNNL_ARG_DIFF_SRC, gx}});
    stream.wait();
  });
  t.weights = MedianMs([&] {
    weights_p.execute(stream, {{DNNL_ARG_SRC, xw}, {DNNL_ARG_DIFF_DST, gyw}, {DNNL_ARG_DIFF_WEIGHTS, gw}});
    stream.wait();
  });
  std::printf("%-22s fwd %7.2f ms %-36s data %7.2f ms %-46s weights %7.2f ms %s\n", s.name, t.forward,
              fwd.impl_info_str(), t.data, bwd_data.impl_info_str(), t.weights, bwd_weights.impl_info_str());
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const bool usage =
      argc < 2 || argc > 3 || (std::strcmp(argv[1], "bf16") != 0 && std::strcmp(argv[1], "f32") != 0) ||
      (argc == 3 && std::strcmp(argv[2], "direct") != 0 && std::strcmp(argv[2], "winograd") != 0);
  if (usage) {
    std::fprintf(stderr, "usage: conv_passes bf16|f32 [direct|winograd]\n");
    return 2;
  }
  const DataType operand = std::strcmp(argv[1], "bf16") == 0 ? DataType::bf16 : DataType::f32;
  const bool winograd = argc == 3 && std::strcmp(argv[2], "winograd") == 0;
  const dnnl::version_t* v = dnnl_version();
  std::printf("oneDNN %d.%d.%d, %s operands, %s algorithm, batch 64, one thread\n", v->major, v->minor,
              v->patch, argv[1], winograd ? "Winograd" : "direct");
  double forward = 0, data = 0, weights = 0;
  for (const Shape& s : kShapes) {
    try {
      const Times t = TimeShape(
          s, operand, winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct);
      forward += t.forward * s.uses;
      data += t.data * s.uses;
      weights += t.weights * s.uses;
    } catch (const dnnl::error& e) {
      std::printf("%-22s no kernel: %s\n", s.name, e.what());
    }
  }
  std::printf(
      "per step (x uses, shapes with kernels): fwd %.1f ms, data %.1f ms, weights %.1f ms, total %.1f ms\n",
      forward, data, weights, forward + data + weights);
  return 0;
}
