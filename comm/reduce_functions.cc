#include "comm/reduce_functions.h"

#include <algorithm>
#include <cstdint>

#include "tensor/check.h"

namespace ddp {
namespace {

struct SumOp {
  template <typename T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct ProductOp {
  template <typename T>
  T operator()(T a, T b) const {
    return a * b;
  }
};
struct MinOp {
  template <typename T>
  T operator()(T a, T b) const {
    return std::min(a, b);
  }
};
struct MaxOp {
  template <typename T>
  T operator()(T a, T b) const {
    return std::max(a, b);
  }
};

template <typename T, typename Op>
void Native(void* c, const void* a, const void* b, size_t n) {
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  Op op;
  for (size_t i = 0; i < n; ++i) out[i] = op(x[i], y[i]);
}

// 16-bit floats reduce in float32 and round once per step.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), typename Op>
void Packed16(void* c, const void* a, const void* b, size_t n) {
  uint16_t* out = static_cast<uint16_t*>(c);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  Op op;
  for (size_t i = 0; i < n; ++i) out[i] = FromFloat(op(ToFloat(x[i]), ToFloat(y[i])));
}

template <typename Op>
RawReduceFunction ForDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return &Native<float, Op>;
    case DType::kInt64:
      return &Native<int64_t, Op>;
    case DType::kFloat16:
      return &Packed16<HalfToFloat, FloatToHalf, Op>;
    case DType::kBFloat16:
      return &Packed16<BFloat16ToFloat, FloatToBFloat16, Op>;
  }
  return nullptr;
}

}  // namespace

RawReduceFunction GetReduceFunction(DType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return ForDType<SumOp>(dtype);
    case ReduceOp::kProduct:
      return ForDType<ProductOp>(dtype);
    case ReduceOp::kMin:
      return ForDType<MinOp>(dtype);
    case ReduceOp::kMax:
      return ForDType<MaxOp>(dtype);
  }
  return nullptr;
}

void DivideInPlace(void* data, DType dtype, size_t n, int divisor) {
  switch (dtype) {
    case DType::kFloat32: {
      float* p = static_cast<float*>(data);
      const float d = static_cast<float>(divisor);
      for (size_t i = 0; i < n; ++i) p[i] /= d;
      return;
    }
    case DType::kInt64: {
      int64_t* p = static_cast<int64_t*>(data);
      for (size_t i = 0; i < n; ++i) {
        const int64_t q = p[i] / divisor;
        p[i] = (p[i] % divisor != 0 && p[i] < 0) ? q - 1 : q;
      }
      return;
    }
    case DType::kFloat16: {
      uint16_t* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < n; ++i) p[i] = FloatToHalf(HalfToFloat(p[i]) / divisor);
      return;
    }
    case DType::kBFloat16: {
      uint16_t* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < n; ++i) p[i] = FloatToBFloat16(BFloat16ToFloat(p[i]) / divisor);
      return;
    }
  }
}

}  // namespace ddp
