#include "data/idx_reader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data/fashion_mnist.h"

namespace ddp {
namespace {

std::vector<uint8_t> IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims, size_t data_bytes) {
  std::vector<uint8_t> out;
  auto put32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
  };
  put32(magic);
  for (uint32_t d : dims) put32(d);
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i % 10));
  return out;
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

void WriteGzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
  gzclose(f);
}

void WritePlain(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

TEST(IdxReaderTest, ParsesImagesAndLabels) {
  auto images = ParseIdx("x", IdxBytes(0x803, {2, 3, 4}, 24));
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(images->data.size(), 24u);
  auto labels = ParseIdx("y", IdxBytes(0x801, {5}, 5));
  ASSERT_TRUE(labels.ok());
  EXPECT_EQ(labels->data[3], 3);
}

TEST(IdxReaderTest, CorruptBuffersGiveNamedErrors) {
  EXPECT_NE(ParseIdx("f", {1, 2}).status().message().find("f: truncated"), std::string::npos);
  EXPECT_NE(ParseIdx("f", IdxBytes(0x1803, {2}, 2)).status().message().find("bad magic number"), std::string::npos);
  EXPECT_NE(ParseIdx("f", IdxBytes(0x803, {2, 3, 4}, 23)).status().message().find("truncated: dimensions need 24"),
            std::string::npos);
  EXPECT_NE(ParseIdx("f", IdxBytes(0x801, {2}, 3)).status().message().find("trailing"), std::string::npos);
  std::vector<uint8_t> header_cut = IdxBytes(0x803, {2, 3, 4}, 0);
  header_cut.resize(9);
  EXPECT_NE(ParseIdx("f", header_cut).status().message().find("truncated in the header"), std::string::npos);
}

TEST(IdxReaderTest, EveryTruncationOfAValidFileIsAnError) {
  std::vector<uint8_t> valid = IdxBytes(0x803, {2, 2, 2}, 8);
  for (size_t n = 0; n < valid.size(); ++n) {
    std::vector<uint8_t> cut(valid.begin(), valid.begin() + n);
    EXPECT_FALSE(ParseIdx("f", cut).ok()) << "length " << n;
  }
}

TEST(IdxReaderTest, ReadsGzipAndPlainFilesAndRejectsTruncatedGzip) {
  const std::string gz = TempDir() + "/a.idx.gz", plain = TempDir() + "/a.idx";
  std::vector<uint8_t> bytes = IdxBytes(0x803, {10, 28, 28}, 7840);
  WriteGzip(gz, bytes);
  WritePlain(plain, bytes);
  ASSERT_TRUE(ReadIdxFile(gz).ok());
  ASSERT_TRUE(ReadIdxFile(plain).ok());
  std::ifstream in(gz, std::ios::binary);
  std::vector<char> compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string cut_path = TempDir() + "/cut.idx.gz";
  std::ofstream(cut_path, std::ios::binary).write(compressed.data(), compressed.size() / 2);
  auto cut = ReadIdxFile(cut_path);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find(cut_path), std::string::npos) << cut.status();
}

TEST(IdxReaderTest, MissingFileNamesThePackage) {
  auto missing = ReadIdxFile("/nonexistent/train-images-idx3-ubyte.gz");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("dataset-fashion-mnist"), std::string::npos);
}

// A FIFO (nobody writes it) or a device in place of a file is refused by name instead of blocking the
// read or reading forever.
TEST(IdxReaderTest, WhatIsNotARegularFileIsRefused) {
  const std::string fifo = TempDir() + "/idx_fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  auto from_fifo = ReadIdxFile(fifo);
  ASSERT_FALSE(from_fifo.ok());
  EXPECT_EQ(from_fifo.status().message(), "cannot read " + fifo + ": it is a FIFO, not a regular file");
  EXPECT_EQ(ReadIdxFile("/dev/zero").status().message(),
            "cannot read /dev/zero: it is a character device, not a regular file");
}

TEST(FashionMnistTest, MismatchedCountsAndBadLabelsAreNamed) {
  const std::string dir = TempDir() + "/fm";
  std::filesystem::create_directories(dir);
  WriteGzip(dir + "/t10k-images-idx3-ubyte.gz", IdxBytes(0x803, {3, 28, 28}, 3 * 784));
  WriteGzip(dir + "/t10k-labels-idx1-ubyte.gz", IdxBytes(0x801, {2}, 2));
  auto mismatch = LoadFashionMnist(dir, Split::kTest);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("has 3 images but"), std::string::npos) << mismatch.status();
  std::vector<uint8_t> labels = IdxBytes(0x801, {3}, 3);
  labels.back() = 12;
  WriteGzip(dir + "/t10k-labels-idx1-ubyte.gz", labels);
  auto bad_label = LoadFashionMnist(dir, Split::kTest);
  ASSERT_FALSE(bad_label.ok());
  EXPECT_NE(bad_label.status().message().find("label 12 at index 2"), std::string::npos) << bad_label.status();
}

TEST(FashionMnistTest, RealTestSetLoadsNormalised) {
  auto test = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ((*test)->Size(), 10000);
  EXPECT_EQ((*test)->image_shape(), (Shape{1, 28, 28}));
  EXPECT_EQ((*test)->held_bytes(), 10000 * (784 + 8));  // bytes per pixel, not a float32 copy
  std::vector<int64_t> all(10000);
  for (int64_t i = 0; i < 10000; ++i) all[i] = i;
  absl::StatusOr<Example> batch = (*test)->GetBatch(all);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->input.shape(), (Shape{10000, 1, 28, 28}));
  const float* x = batch->input.data<float>();
  double sum = 0, sq = 0;
  const int64_t n = batch->input.numel();
  for (int64_t i = 0; i < n; ++i) {
    sum += x[i];
    sq += x[i] * x[i];
  }
  EXPECT_NEAR(sum / n, 0.0, 0.02);  // test set statistics are close to the training set's
  EXPECT_NEAR(std::sqrt(sq / n - (sum / n) * (sum / n)), 1.0, 0.03);
}

}  // namespace
}  // namespace ddp
