#include "testing/cifar_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

constexpr int kSide = 32, kPlane = kSide * kSide, kSquare = 12;

// Ten colours far apart in RGB.
const uint8_t kColours[10][3] = {{255, 0, 0},     {0, 255, 0},    {0, 0, 255},   {255, 255, 0},
                                 {255, 0, 255},   {0, 255, 255},  {255, 128, 0}, {128, 0, 255},
                                 {255, 255, 255}, {128, 128, 128}};

}  // namespace

std::vector<CifarRecord> SyntheticCifarRecords(int64_t n, int num_classes, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int> noise(0, 63), corner(0, kSide - kSquare);
  std::vector<CifarRecord> records(n);
  for (int64_t i = 0; i < n; ++i) {
    CifarRecord& record = records[i];
    record.label = static_cast<int>(i % num_classes);
    record.coarse_label = record.label / 5;
    record.pixels.resize(3 * kPlane);
    for (uint8_t& p : record.pixels) p = static_cast<uint8_t>(noise(random));
    const int top = corner(random), left = corner(random);
    const uint8_t* colour = kColours[record.label % 10];
    for (int c = 0; c < 3; ++c) {
      for (int y = top; y < top + kSquare; ++y) {
        for (int x = left; x < left + kSquare; ++x) record.pixels[c * kPlane + y * kSide + x] = colour[c];
      }
    }
  }
  return records;
}

void WriteCifarFile(const std::string& path, const std::vector<CifarRecord>& records, bool cifar100) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(out.good()) << "cannot create " << path;
  for (const CifarRecord& record : records) {
    ASSERT_EQ(record.pixels.size(), size_t{3 * kPlane});
    if (cifar100) out.put(static_cast<char>(record.coarse_label));
    out.put(static_cast<char>(record.label));
    out.write(reinterpret_cast<const char*>(record.pixels.data()),
              static_cast<std::streamsize>(record.pixels.size()));
  }
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

void WriteSyntheticCifar10(const std::string& dir, int64_t train, int64_t test, uint64_t seed) {
  ::mkdir(dir.c_str(), 0755);
  const std::vector<CifarRecord> train_records = SyntheticCifarRecords(train, 10, seed);
  for (int64_t file = 0; file < 5; ++file) {
    const auto begin = train_records.begin() + file * train / 5,
               end = train_records.begin() + (file + 1) * train / 5;
    WriteCifarFile(absl::StrCat(dir, "/data_batch_", file + 1, ".bin"), std::vector<CifarRecord>(begin, end));
  }
  WriteCifarFile(dir + "/test_batch.bin", SyntheticCifarRecords(test, 10, seed + 1));
}

}  // namespace ddp
