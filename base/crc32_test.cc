// base/crc32.h against zlib's crc32 (the reference ZIP uses): every length up to 1,100 bytes at every
// alignment up to 16, continued from several starting values, and a 45 MB buffer, as one call and in
// pieces.
#include "base/crc32.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <random>
#include <string>

namespace ddp {
namespace {

uint32_t Zlib(const std::string& s, size_t at, size_t n, uint32_t crc = 0) {
  return static_cast<uint32_t>(crc32_z(crc, reinterpret_cast<const Bytef*>(s.data() + at), n));
}

std::string RandomBytes(size_t n, unsigned seed) {
  std::mt19937 random(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(random());
  return s;
}

TEST(Crc32Test, EqualsZlibForEveryLengthAlignmentAndStart) {
  const std::string bytes = RandomBytes(1200, 1);
  EXPECT_EQ(Crc32("123456789", 9), 0xcbf43926u);  // the check value of CRC-32/ISO-HDLC
  for (uint32_t start : {0u, 1u, 0xffffffffu, 0x12345678u}) {
    for (size_t at = 0; at < 16; ++at) {
      for (size_t n = 0; n <= 1100; ++n) {
        ASSERT_EQ(Crc32(bytes.data() + at, n, start), Zlib(bytes, at, n, start))
            << at << " " << n << " " << start;
      }
    }
  }
}

TEST(Crc32Test, EqualsZlibOnALargeBufferWholeAndInPieces) {
  const std::string bytes = RandomBytes(45 << 20, 2);
  const uint32_t whole = Zlib(bytes, 0, bytes.size());
  EXPECT_EQ(Crc32(bytes.data(), bytes.size()), whole);
  uint32_t pieces = 0;
  for (size_t at = 0, n = 1; at < bytes.size(); at += n, n = n * 3 + 7) {
    n = std::min(n, bytes.size() - at);
    pieces = Crc32(bytes.data() + at, n, pieces);
  }
  EXPECT_EQ(pieces, whole);
}

}  // namespace
}  // namespace ddp
