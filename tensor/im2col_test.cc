// im2col and col2im (tensor/im2col.h, tensor/im2col_avx512.h) against their definitions, element for
// element, over kernels 1-7, strides 1-3, paddings 0-3 and images from 1x1 to 40x40, in float32 and bf16,
// for whole batches and for groups starting inside one. The inputs and col sit flush against
// inaccessible pages, so a read or write one element outside them crashes the test.
#include "tensor/im2col.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tensor/im2col_avx512.h"
#include "tensor/low_precision_round.h"

namespace ddp {
namespace cpu {
namespace {

// `count` elements of T between two inaccessible pages, flush against the one after them (or, with
// flush_end false, the one before them).
template <typename T>
class GuardedArray {
 public:
  GuardedArray(int64_t count, bool flush_end) : count_(count) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    data_pages_ = (bytes + page_ - 1) / page_;
    mapping_ = static_cast<uint8_t*>(
        mmap(nullptr, (data_pages_ + 2) * page_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(mapping_, MAP_FAILED);
    EXPECT_EQ(mprotect(mapping_ + page_, data_pages_ * page_, PROT_READ | PROT_WRITE), 0);
    uint8_t* first = mapping_ + page_;
    data_ = reinterpret_cast<T*>(flush_end ? first + data_pages_ * page_ - bytes : first);
  }
  ~GuardedArray() { munmap(mapping_, (data_pages_ + 2) * page_); }
  GuardedArray(const GuardedArray&) = delete;
  GuardedArray& operator=(const GuardedArray&) = delete;
  T* data() { return data_; }
  int64_t size() const { return count_; }

 private:
  int64_t count_;
  size_t page_ = 0, data_pages_ = 0;
  uint8_t* mapping_ = nullptr;
  T* data_ = nullptr;
};

uint32_t Bits(float v) { return functors::FloatBits(v); }
uint32_t Bits(BFloat16 v) { return v.bits; }

// A nonzero value for element i, so that padding (zero) is told apart from any input element.
template <typename T>
T DistinctValue(int64_t i);
template <>
float DistinctValue<float>(int64_t i) {
  return static_cast<float>(i + 1);
}
template <>
BFloat16 DistinctValue<BFloat16>(int64_t i) {
  return BFloat16{static_cast<uint16_t>(i % 0x7f00 + 1)};
}

// The definition of col for images [first, first + count) (tensor/im2col.h).
template <typename T>
std::vector<T> ReferenceIm2Col(const T* x, const ConvGeometry& g, int64_t first, int64_t count) {
  const int64_t P = g.P(), ld = count * P;
  std::vector<T> col(static_cast<size_t>(g.K() * ld), T{});
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t ch = 0; ch < g.c; ++ch) {
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          const int64_t row = (ch * g.kh + ki) * g.kw + kj;
          for (int64_t p = 0; p < P; ++p) {
            const int64_t iy = p / g.ow * g.stride + ki - g.padding,
                          ix = p % g.ow * g.stride + kj - g.padding;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
            col[row * ld + i * P + p] = x[(((first + i) * g.c + ch) * g.h + iy) * g.w + ix];
          }
        }
      }
    }
  }
  return col;
}

struct Case {
  int64_t c, h, w, k, stride, padding;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  const int64_t sizes[][2] = {{1, 1},  {2, 2},   {4, 4},   {5, 9},   {7, 7},  {8, 8},  {9, 5},
                              {11, 6}, {14, 14}, {17, 17}, {28, 28}, {33, 3}, {40, 40}};
  for (const auto& size : sizes) {
    for (int64_t k : {1, 2, 3, 5, 7}) {
      for (int64_t stride : {1, 2, 3}) {
        for (int64_t padding : {0, 1, 3}) {
          if (size[0] + 2 * padding < k || size[1] + 2 * padding < k) continue;
          for (int64_t c : {1, 3}) cases.push_back({c, size[0], size[1], k, stride, padding});
        }
      }
    }
  }
  return cases;
}

ConvGeometry GeometryOf(const Case& t, int64_t n) {
  const int64_t oh = (t.h + 2 * t.padding - t.k) / t.stride + 1,
                ow = (t.w + 2 * t.padding - t.k) / t.stride + 1;
  return {n, t.c, t.h, t.w, 1, t.k, t.k, t.stride, t.padding, oh, ow};
}

template <typename T>
void ExpectIm2ColMatchesDefinition() {
  const int64_t n = 3;
  const int64_t groups[][2] = {{0, 3}, {1, 2}, {2, 1}};
  for (const Case& t : Cases()) {
    const ConvGeometry g = GeometryOf(t, n);
    for (bool flush_end : {true, false}) {
      GuardedArray<T> x(n * g.c * g.h * g.w, flush_end);
      for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = DistinctValue<T>(i);
      for (const auto& group : groups) {
        const std::vector<T> want = ReferenceIm2Col(x.data(), g, group[0], group[1]);
        GuardedArray<T> col(static_cast<int64_t>(want.size()), flush_end);
        for (int64_t i = 0; i < col.size(); ++i) col.data()[i] = DistinctValue<T>(7 * i + 3);  // stale values
        Im2ColGroup(x.data(), g, group[0], group[1], col.data());
        for (int64_t i = 0; i < col.size(); ++i) {
          ASSERT_EQ(Bits(col.data()[i]), Bits(want[i]))
              << "element " << i << " of col, " << g.c << "x" << g.h << "x" << g.w << " k " << g.kh
              << " stride " << g.stride << " padding " << g.padding << " images [" << group[0] << ", +"
              << group[1] << ")";
        }
      }
    }
  }
}

TEST(Im2ColTest, FloatMatchesDefinition) { ExpectIm2ColMatchesDefinition<float>(); }
TEST(Im2ColTest, BFloat16MatchesDefinition) { ExpectIm2ColMatchesDefinition<BFloat16>(); }

// The AVX-512 methods take ResNet-18's small and strided shapes on a CPU that has AVX-512 F and BW (so
// the cases above test them there), and leave stride-1 rows that are contiguous runs to memcpy.
TEST(Im2ColTest, Avx512TakesTheShapesItCovers) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw"))
    GTEST_SKIP() << "no AVX-512 F and BW on this CPU: the portable loops ran every case";
  const char* setting = std::getenv("DDP_IM2COL_AVX512");
  if (setting != nullptr && std::string(setting) == "0")
    GTEST_SKIP() << "DDP_IM2COL_AVX512=0: the portable loops ran every case";
  const ConvGeometry layer4 = GeometryOf({4, 4, 4, 3, 1, 1}, 2),
                     strided = GeometryOf({4, 14, 14, 3, 2, 1}, 2);
  const ConvGeometry contiguous = GeometryOf({4, 28, 28, 3, 1, 1}, 2),
                     stride3 = GeometryOf({4, 28, 28, 3, 3, 1}, 2);
  std::vector<float> x(static_cast<size_t>(2 * 4 * 28 * 28)), col(static_cast<size_t>(36 * 28 * 28 * 2));
  std::vector<BFloat16> xb(x.size()), colb(col.size());
  EXPECT_TRUE(Im2ColGroupAvx512(x.data(), layer4, 0, 2, col.data()));
  EXPECT_TRUE(Im2ColGroupAvx512(xb.data(), layer4, 0, 2, colb.data()));
  EXPECT_TRUE(Im2ColGroupAvx512(x.data(), strided, 0, 2, col.data()));
  EXPECT_TRUE(Im2ColGroupAvx512(xb.data(), strided, 0, 2, colb.data()));
  EXPECT_FALSE(Im2ColGroupAvx512(xb.data(), contiguous, 0, 2, colb.data()));
  EXPECT_FALSE(Im2ColGroupAvx512(xb.data(), stride3, 0, 2, colb.data()));
}

// col2im accumulates each col element into the input element it was unfolded from, in row order.
TEST(Im2ColTest, Col2ImMatchesDefinition) {
  const int64_t n = 3;
  for (const Case& t : Cases()) {
    const ConvGeometry g = GeometryOf(t, n);
    const int64_t first = 1, count = 2, P = g.P(), ld = count * P;
    std::vector<float> col(static_cast<size_t>(g.K() * ld)), gx(static_cast<size_t>(n * g.c * g.h * g.w));
    for (size_t i = 0; i < col.size(); ++i) col[i] = 0.25f * static_cast<float>(i % 97) - 3.0f;
    for (size_t i = 0; i < gx.size(); ++i) gx[i] = static_cast<float>(i % 5);
    std::vector<float> want = gx;
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t row = 0; row < g.K(); ++row) {
        const int64_t ch = row / (g.kh * g.kw), ki = row / g.kw % g.kh, kj = row % g.kw;
        for (int64_t p = 0; p < P; ++p) {
          const int64_t iy = p / g.ow * g.stride + ki - g.padding, ix = p % g.ow * g.stride + kj - g.padding;
          if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
          want[(((first + i) * g.c + ch) * g.h + iy) * g.w + ix] += col[row * ld + i * P + p];
        }
      }
    }
    Col2ImGroup(col.data(), g, first, count, gx.data());
    for (size_t i = 0; i < gx.size(); ++i) {
      ASSERT_EQ(Bits(gx[i]), Bits(want[i]))
          << "gx element " << i << ", " << g.c << "x" << g.h << "x" << g.w << " k " << g.kh << " stride "
          << g.stride << " padding " << g.padding;
    }
  }
}

}  // namespace
}  // namespace cpu
}  // namespace ddp
