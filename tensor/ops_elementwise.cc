// Element-wise ops and their backward, once for both devices: the math is a functor of tensor/functors.h
// that MapUnary / MapBinary run on the operands' device (tensor/elementwise_kernels.h), and each backward is
// written in terms of other ops.
#include <algorithm>

#include "tensor/elementwise_kernels.h"
#include "tensor/function_node.h"
#include "tensor/functors.h"
#include "tensor/op_device.h"
#include "tensor/ops.h"

namespace ddp {

Shape BroadcastShapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    DDP_CHECK(da == db || da == 1 || db == 1)
        << "shapes " << ShapeToString(a) << " and " << ShapeToString(b) << " do not broadcast";
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor SumToShape(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const size_t lead = grad.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < grad.shape().size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && grad.shape()[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  }
  return Reshape(Sum(grad, dims, /*keepdim=*/true), shape);
}

Tensor ZerosLike(const Tensor& x) {
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  FillInPlace(out, 0.0f);
  return out;
}

Tensor OnesLike(const Tensor& x) {
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  FillInPlace(out, 1.0f);
  return out;
}

Tensor Add(const Tensor& a, const Tensor& b) {
  RequireFloatOnOneDevice("Add", {&a, &b});
  Tensor out = MapBinary(a, b, BroadcastShapes(a.shape(), b.shape()), functors::Add());
  Shape sa = a.shape(), sb = b.shape();
  return RecordOp(out, "AddBackward", {&a, &b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{SumToShape(g, sa), SumToShape(g, sb)};
  });
}

Tensor Sub(const Tensor& a, const Tensor& b) {
  RequireFloatOnOneDevice("Sub", {&a, &b});
  Tensor out = MapBinary(a, b, BroadcastShapes(a.shape(), b.shape()), functors::Sub());
  Shape sa = a.shape(), sb = b.shape();
  return RecordOp(out, "SubBackward", {&a, &b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{SumToShape(g, sa), SumToShape(Neg(g), sb)};
  });
}

Tensor Mul(const Tensor& a, const Tensor& b) {
  RequireFloatOnOneDevice("Mul", {&a, &b});
  Tensor out = MapBinary(a, b, BroadcastShapes(a.shape(), b.shape()), functors::Mul());
  Tensor ad = a.Detach(), bd = b.Detach();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return RecordOp(out, "MulBackward", {&a, &b}, [ad, bd, need_a, need_b](const Tensor& g) {
    return std::vector<Tensor>{need_a ? SumToShape(Mul(g, bd), ad.shape()) : Tensor(),
                               need_b ? SumToShape(Mul(g, ad), bd.shape()) : Tensor()};
  });
}

Tensor Div(const Tensor& a, const Tensor& b) {
  RequireFloatOnOneDevice("Div", {&a, &b});
  Tensor out = MapBinary(a, b, BroadcastShapes(a.shape(), b.shape()), functors::Div());
  Tensor ad = a.Detach(), bd = b.Detach();
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  return RecordOp(out, "DivBackward", {&a, &b}, [ad, bd, need_a, need_b](const Tensor& g) {
    // d(a/b)/db = -a / b^2
    return std::vector<Tensor>{
        need_a ? SumToShape(Div(g, bd), ad.shape()) : Tensor(),
        need_b ? SumToShape(Neg(Div(Mul(g, ad), Mul(bd, bd))), bd.shape()) : Tensor()};
  });
}

Tensor AddScalar(const Tensor& a, float s) {
  RequireFloatOnOneDevice("AddScalar", {&a});
  return RecordOp(MapUnary(a, functors::AddScalar{s}), "AddScalarBackward", {&a},
                  [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor MulScalar(const Tensor& a, float s) {
  RequireFloatOnOneDevice("MulScalar", {&a});
  return RecordOp(MapUnary(a, functors::MulScalar{s}), "MulScalarBackward", {&a},
                  [s](const Tensor& g) { return std::vector<Tensor>{MulScalar(g, s)}; });
}

Tensor Neg(const Tensor& a) {
  RequireFloatOnOneDevice("Neg", {&a});
  return RecordOp(MapUnary(a, functors::Neg()), "NegBackward", {&a},
                  [](const Tensor& g) { return std::vector<Tensor>{Neg(g)}; });
}

Tensor Relu(const Tensor& a) {
  RequireFloatOnOneDevice("Relu", {&a});
  Tensor out = MapUnary(a, functors::Relu());
  Tensor saved = out.Detach();  // relu'(x) = out > 0
  return RecordOp(out, "ReluBackward", {&a}, [saved](const Tensor& g) {
    return std::vector<Tensor>{MapBinary(g, saved, g.shape(), functors::ReluBackward())};
  });
}

Tensor Exp(const Tensor& a) {
  RequireFloatOnOneDevice("Exp", {&a});
  Tensor out = MapUnary(a, functors::Exp());
  Tensor saved = out.Detach();
  return RecordOp(out, "ExpBackward", {&a},
                  [saved](const Tensor& g) { return std::vector<Tensor>{Mul(g, saved)}; });
}

Tensor Log(const Tensor& a) {
  RequireFloatOnOneDevice("Log", {&a});
  Tensor ad = a.Detach();
  return RecordOp(MapUnary(a, functors::Log()), "LogBackward", {&a},
                  [ad](const Tensor& g) { return std::vector<Tensor>{Div(g, ad)}; });
}

Tensor Sqrt(const Tensor& a) {
  RequireFloatOnOneDevice("Sqrt", {&a});
  Tensor out = MapUnary(a, functors::Sqrt());
  Tensor saved = out.Detach();
  return RecordOp(out, "SqrtBackward", {&a}, [saved](const Tensor& g) {
    return std::vector<Tensor>{Div(MulScalar(g, 0.5f), saved)};
  });
}

}  // namespace ddp
