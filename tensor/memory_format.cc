#include "tensor/memory_format.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "tensor/autocast.h"
#include "tensor/function_node.h"
#include "tensor/layout_transpose.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// dst[i][q][r] = src[i][r][q] for `batch` [rows, cols] matrices of `size`-byte elements, in 16x16 tiles.
void TransposeElements(const char* src, int64_t batch, int64_t rows, int64_t cols, size_t size, char* dst) {
  constexpr int64_t kTile = 16;
#pragma omp parallel for collapse(2) if (batch * rows * cols > (int64_t{1} << 16))
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
      const char* s = src + i * rows * cols * size;
      char* d = dst + i * rows * cols * size;
      for (int64_t q0 = 0; q0 < cols; q0 += kTile) {
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r) {
          for (int64_t q = q0; q < std::min(cols, q0 + kTile); ++q) {
            std::memcpy(d + (q * rows + r) * size, s + (r * cols + q) * size, size);
          }
        }
      }
    }
  }
}

}  // namespace

std::vector<int64_t> ChannelsLastStrides(const Shape& shape) {
  DDP_CHECK(shape.size() == 4) << "channels-last strides of a " << shape.size() << "-d shape "
                               << ShapeToString(shape) << ": expected [n, c, h, w]";
  const int64_t c = shape[1], h = shape[2], w = shape[3];
  return {h * w * c, 1, w * c, c};
}

bool IsChannelsLast(const Tensor& x) {
  if (x.dim() != 4) return false;
  const std::vector<int64_t> expected = ChannelsLastStrides(x.shape());
  for (int d = 0; d < 4; ++d) {
    if (x.shape()[d] != 1 && x.strides()[d] != expected[d]) return false;
  }
  return true;
}

bool HasChannelsLastStrides(const Tensor& x) {
  return x.dim() == 4 && x.strides() == ChannelsLastStrides(x.shape());
}

Tensor EmptyChannelsLast(const Shape& shape, DType dtype, Device device) {
  const Tensor rows = Tensor::Empty({shape.at(0) * shape.at(2) * shape.at(3), shape.at(1)}, dtype, device);
  return ChannelsLastFromRows(rows, shape);
}

Tensor ChannelsLastCopy(const Tensor& x) {
  if (IsChannelsLast(x)) return x;
  DDP_CHECK(x.dim() == 4 && x.device().is_cpu())
      << "channels-last copy of " << ShapeToString(x.shape()) << " on " << x.device().ToString()
      << ": expected a 4-d CPU tensor";
  const Tensor source = Contiguous(x.Detach());
  Tensor out = EmptyChannelsLast(x.shape(), x.dtype());
  const int64_t n = x.shape()[0], c = x.shape()[1], pixels = x.shape()[2] * x.shape()[3];
  if (x.dtype() == DType::kFloat32) {
    cpu::Transpose32(source.data<float>(), n, c, pixels, out.data<float>());
  } else {
    TransposeElements(static_cast<const char*>(source.raw_data()), n, c, pixels, ElementSize(x.dtype()),
                      static_cast<char*>(out.raw_data()));
  }
  return out;
}

Tensor CloneChannelsLast(const Tensor& x) {
  if (!IsChannelsLast(x)) return ChannelsLastCopy(x);
  Tensor out = EmptyChannelsLast(x.shape(), x.dtype(), x.device());
  std::memcpy(out.raw_data(), x.raw_data(), x.nbytes());
  return out;
}

Tensor RowsOf(const Tensor& x) {
  DDP_CHECK(IsChannelsLast(x)) << "RowsOf: " << ShapeToString(x.shape()) << " is not channels-last";
  const Shape rows{x.shape()[0] * x.shape()[2] * x.shape()[3], x.shape()[1]};
  const Tensor out = Tensor::View(x.storage(), rows, ContiguousStrides(rows), x.storage_offset(), x.dtype());
  const Shape shape = x.shape();
  return RecordOp(out, "RowsOfBackward", {&x}, [shape](const Tensor& g) {
    return std::vector<Tensor>{ChannelsLastFromRows(Contiguous(g), shape)};
  });
}

Tensor ChannelsLastFromRows(const Tensor& rows, const Shape& shape) {
  DDP_CHECK(rows.is_contiguous() && rows.dim() == 2 && shape.size() == 4 &&
            rows.shape()[0] == shape[0] * shape[2] * shape[3] && rows.shape()[1] == shape[1])
      << "ChannelsLastFromRows: rows " << ShapeToString(rows.shape()) << " do not hold "
      << ShapeToString(shape);
  const Tensor out =
      Tensor::View(rows.storage(), shape, ChannelsLastStrides(shape), rows.storage_offset(), rows.dtype());
  const Tensor copy = AttachedAutocastCopy(rows);
  if (copy.defined()) AttachAutocastCopy(out, ChannelsLastFromRows(copy, shape));
  return RecordOp(out, "ChannelsLastFromRowsBackward", {&rows},
                  [](const Tensor& g) { return std::vector<Tensor>{RowsOf(ChannelsLastCopy(g.Detach()))}; });
}

}  // namespace ddp
