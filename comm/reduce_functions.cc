#include "comm/reduce_functions.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/check.h"
#include "tensor/half_convert.h"
#include "tensor/low_precision_round.h"

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

// bfloat16 reduces in float32 and rounds once per step, with the conversions of
// tensor/low_precision_round.h inlined (a shift widens, integer arithmetic rounds, so the loop vectorises;
// the bits are those of FloatToBFloat16, which calls the same functors).
template <typename ToFloat, typename FromFloat, typename Op>
void Packed16(void* c, const void* a, const void* b, size_t n) {
  uint16_t* out = static_cast<uint16_t*>(c);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  const ToFloat widen;
  const FromFloat round;
  const Op op;
  for (size_t i = 0; i < n; ++i) out[i] = round(op(widen(x[i]), widen(y[i])));
}

// float16's reduction a chunk at a time: both inputs widened (exactly) into float32 buffers, combined
// there, rounded once on the way out (tensor/half_convert.h: RoundToHalf's bits, eight lanes at a time).
// `c` may be `a`: each chunk is read whole before it is written.
template <typename Op>
void ChunkedHalf(void* c, const void* a, const void* b, size_t n) {
  constexpr size_t kChunk = 256;
  uint16_t* out = static_cast<uint16_t*>(c);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  const Op op;
  float wide_x[kChunk], wide_y[kChunk];
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = static_cast<int64_t>(std::min(kChunk, n - begin));
    cpu::HalfToFloatRun(x + begin, wide_x, count);
    cpu::HalfToFloatRun(y + begin, wide_y, count);
    for (int64_t i = 0; i < count; ++i) wide_x[i] = op(wide_x[i], wide_y[i]);
    cpu::FloatToHalfRun(wide_x, out + begin, count);
  }
}

// p[i] = p[i] / divisor for n 16-bit floats, in float32, rounded once (kAvg's final step).
template <typename ToFloat, typename FromFloat>
void DividePacked16(uint16_t* p, size_t n, int divisor) {
  const ToFloat widen;
  const FromFloat round;
  const float d = static_cast<float>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = round(widen(p[i]) / d);
}

template <typename Op>
RawReduceFunction ForDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return &Native<float, Op>;
    case DType::kInt64:
      return &Native<int64_t, Op>;
    case DType::kFloat16:
      return &ChunkedHalf<Op>;
    case DType::kBFloat16:
      return &Packed16<functors::BFloat16ToFloat32, functors::RoundToBFloat16, Op>;
  }
  return nullptr;
}

bool IsPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// The average of two float32 inputs by a power of two, in one pass: (a + b) * (1 / divisor), the bits of
// summing and then dividing (DivideInPlace multiplies by the same exact reciprocal).
void SumTimesPowerOfTwoReciprocal(void* c, const void* a, const void* b, size_t n, int divisor) {
  float* out = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  const float reciprocal = 1.0f / static_cast<float>(divisor);
  for (size_t i = 0; i < n; ++i) out[i] = (x[i] + y[i]) * reciprocal;
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

// Note [Blocked reduction]
// Reducing k inputs pairwise over the whole buffer (out = in0 op in1, then out = out op in2, ...) reads
// `out` back k - 2 times, and a second output costs one more pass over memory. ReduceInputs instead
// works on blocks of kReduceBlockBytes (within L1): it reduces a block of every input into a buffer on
// the stack, in input order, and copies that block to each output. Each input byte crosses the memory
// hierarchy once, each output byte once. Since a block's outputs are written only after all of that
// block's inputs were read, an output may be one of the inputs. Two inputs and one output need no block
// (the element-wise function already reads each once and writes once), and with a second output each
// block is reduced straight into the first and copied from there while in L1; with kAvg's division fused,
// two float32 inputs and a power-of-two divisor (world 2) take a one-pass kernel, and otherwise each block
// is divided while it is in L1, before it is written out.
constexpr size_t kReduceBlockBytes = 4096;

void ReduceInputs(RawReduceFunction fn, size_t element_size, void* out, void* also_out, const void* const* inputs,
                  int num_inputs, size_t n, const FusedDivide* divide) {
  DDP_CHECK(num_inputs >= 2) << "ReduceInputs needs at least two inputs, got " << num_inputs;
  if (divide != nullptr && divide->divisor == 1) divide = nullptr;
  // kAvg of two float32 inputs by a power of two: the sum and the division in one pass (fn is the sum).
  const bool fused_average = num_inputs == 2 && divide != nullptr && divide->dtype == DType::kFloat32 &&
                             IsPowerOfTwo(divide->divisor);
  if (num_inputs == 2 && also_out == nullptr) {  // one pass already; out may alias an input
    if (divide == nullptr) {
      fn(out, inputs[0], inputs[1], n);
      return;
    }
    if (fused_average) {
      SumTimesPowerOfTwoReciprocal(out, inputs[0], inputs[1], n, divide->divisor);
      return;
    }
  }
  // With two inputs and no division left for a later pass, a block is reduced straight into `out` (one
  // pass, which may alias an input) and copied from there, still in L1, to `also_out`; otherwise it is
  // staged on the stack.
  const bool direct = num_inputs == 2 && (divide == nullptr || fused_average);
  alignas(64) char staging[kReduceBlockBytes];
  const size_t per_block = kReduceBlockBytes / element_size;
  for (size_t begin = 0; begin < n; begin += per_block) {
    const size_t count = std::min(per_block, n - begin);
    const size_t offset = begin * element_size;
    auto at = [offset](const void* base) { return static_cast<const char*>(base) + offset; };
    char* block = direct ? static_cast<char*>(out) + offset : staging;
    if (fused_average) {
      SumTimesPowerOfTwoReciprocal(block, at(inputs[0]), at(inputs[1]), count, divide->divisor);
    } else {
      fn(block, at(inputs[0]), at(inputs[1]), count);
      for (int q = 2; q < num_inputs; ++q) fn(block, block, at(inputs[q]), count);
      if (divide != nullptr) DivideInPlace(block, divide->dtype, count, divide->divisor);
    }
    if (!direct) std::memcpy(static_cast<char*>(out) + offset, block, count * element_size);
    if (also_out != nullptr) std::memcpy(static_cast<char*>(also_out) + offset, block, count * element_size);
  }
}

void DivideInPlace(void* data, DType dtype, size_t n, int divisor) {
  switch (dtype) {
    case DType::kFloat32: {
      float* p = static_cast<float*>(data);
      if (IsPowerOfTwo(divisor)) {
        const float reciprocal = 1.0f / static_cast<float>(divisor);  // exact: a power of two
        for (size_t i = 0; i < n; ++i) p[i] *= reciprocal;
        return;
      }
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
    case DType::kFloat16:
      DividePacked16<functors::HalfToFloat32, functors::RoundToHalf>(static_cast<uint16_t*>(data), n,
                                                                     divisor);
      return;
    case DType::kBFloat16:
      DividePacked16<functors::BFloat16ToFloat32, functors::RoundToBFloat16>(static_cast<uint16_t*>(data), n,
                                                                             divisor);
      return;
  }
}

}  // namespace ddp
