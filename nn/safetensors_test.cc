#include "nn/safetensors.h"

#include <cstdio>
#include <cstring>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nn/models.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string Raw(const Tensor& t) { return std::string(static_cast<const char*>(t.raw_data()), t.nbytes()); }

// A file image with a hand-written header and `data_size` bytes of data.
std::string Image(const std::string& header, size_t data_size) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(&out[0], &n, 8);
  return out + header + std::string(data_size, '\x01');
}

NamedTensors AllDTypes() {
  Generator g(0);
  Tensor f32 = Uniform({2, 3}, -1, 1, g);
  Tensor i64 = FromVector(std::vector<int64_t>{-5, 0, 1LL << 40}, {3});
  Tensor f16 = ToDType(FromVector(std::vector<float>{0.5f, -2.0f, 65504.0f, 1e-3f}, {2, 2}), DType::kFloat16);
  Tensor bf16 = ToDType(FromVector(std::vector<float>{1.5f, -3.0f, 1e20f}, {3}), DType::kBFloat16);
  Tensor scalar = FromVector(std::vector<int64_t>{42}, {});
  Tensor empty = Zeros({0, 4});
  // A transposed (strided) view is written contiguously.
  Tensor strided = Transpose(FromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}), 0, 1);
  return {{"f32", f32},     {"i64", i64},     {"f16", f16},         {"bf16", bf16},
          {"scalar", scalar}, {"empty", empty}, {"strided", strided}};
}

TEST(SafetensorsTest, RoundTripAllDTypes) {
  const NamedTensors tensors = AllDTypes();
  const std::string path = TempPath("all.safetensors");
  ASSERT_TRUE(SaveSafetensors(path, tensors, {{"step", "12"}, {"format", "pt"}}).ok());
  auto loaded = ReadSafetensors(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->metadata.at("step"), "12");
  EXPECT_EQ(loaded->metadata.at("format"), "pt");
  ASSERT_EQ(loaded->tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, want] = tensors[i];
    const auto& [got_name, got] = loaded->tensors[i];  // file order = save order
    EXPECT_EQ(got_name, name);
    EXPECT_EQ(got.shape(), want.shape()) << name;
    EXPECT_EQ(got.dtype(), want.dtype()) << name;
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_EQ(Raw(got), Raw(Contiguous(want))) << name;
  }
  // The header is padded so that the data starts at a multiple of 8.
  std::ifstream file(path, std::ios::binary);
  uint64_t header_size = 0;
  file.read(reinterpret_cast<char*>(&header_size), 8);
  EXPECT_EQ(header_size % 8, 0u);
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());  // the temporary is gone
}

TEST(SafetensorsTest, KnownBytes) {
  // {"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} as the reference implementation writes it.
  auto bytes = SerializeSafetensors({{"a", FromVector(std::vector<float>{1.0f}, {1})}});
  ASSERT_TRUE(bytes.ok());
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_EQ(bytes->substr(8, header.size()), header);
  EXPECT_EQ(bytes->size(), 8 + 56 + 4u);  // 54 bytes of JSON padded to 56
  EXPECT_EQ(bytes->substr(8 + 54, 2), "  ");
}

TEST(SafetensorsTest, RejectsBadNames) {
  EXPECT_FALSE(SerializeSafetensors({{"a", Zeros({1})}, {"a", Zeros({1})}}).ok());
  EXPECT_FALSE(SerializeSafetensors({{"", Zeros({1})}}).ok());
  EXPECT_FALSE(SerializeSafetensors({{"__metadata__", Zeros({1})}}).ok());
}

TEST(SafetensorsTest, TruncatedAtEveryPointIsAnError) {
  auto bytes = SerializeSafetensors(AllDTypes(), {{"k", "v"}});
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(ParseSafetensors(*bytes, "full").ok());
  for (size_t n = 0; n < bytes->size(); ++n) {
    auto parsed = ParseSafetensors(bytes->substr(0, n), "cut.safetensors");
    ASSERT_FALSE(parsed.ok()) << "truncated to " << n << " bytes";
    EXPECT_THAT(parsed.status().message(), HasSubstr("cut.safetensors"));
  }
  // Trailing garbage.
  auto extra = ParseSafetensors(*bytes + "xyz", "extra");
  ASSERT_FALSE(extra.ok());
  EXPECT_THAT(extra.status().message(), HasSubstr("3 bytes after the last tensor"));
}

TEST(SafetensorsTest, FlippedBytesNeverCrash) {
  auto bytes = SerializeSafetensors(AllDTypes());
  ASSERT_TRUE(bytes.ok());
  for (size_t i = 0; i < bytes->size(); ++i) {
    std::string corrupt = *bytes;
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
    ParseSafetensors(corrupt, "flip").ok();  // either outcome, but no crash
  }
}

TEST(SafetensorsTest, CorruptHeaders) {
  struct Case {
    std::string image, expected;
  };
  std::string huge(8, '\xff');
  const std::vector<Case> cases = {
      {"abc", "too small"},
      {huge + "{}", "header length"},
      {Image("{\"a\": ", 0), "not valid JSON"},
      {Image("[1, 2]  ", 0), "not a JSON object"},
      {Image(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8), "tensor \"w\""},
      {Image(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8), "F64"},
      {Image(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4), "\"dtype\""},
      {Image(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "negative"},
      {Image(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4), "non-integer"},
      {Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 4), "out of range"},
      {Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4), "out of range"},
      {Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), "needs 8"},
      {Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4), "data_offsets"},
      {Image(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})",
             4),
       "overflows"},
      {Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
             8),
       "overlap"},
      {Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "gap"},
      {Image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 6), "2 bytes after"},
      {Image(R"({"__metadata__":{"k":1}})", 0), "metadata \"k\""},
      {Image(R"({"w":7})", 0), "not a JSON object"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseSafetensors(c.image, "bad.safetensors");
    ASSERT_FALSE(parsed.ok()) << c.expected;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.expected));
    EXPECT_THAT(parsed.status().message(), HasSubstr("bad.safetensors"));
  }
  EXPECT_TRUE(ParseSafetensors(Image("{}", 0), "empty").ok());
}

TEST(SafetensorsTest, MissingFile) {
  auto loaded = LoadSafetensors(TempPath("does_not_exist.safetensors"));
  EXPECT_TRUE(absl::IsNotFound(loaded.status())) << loaded.status();
  EXPECT_THAT(loaded.status().message(), HasSubstr("does_not_exist.safetensors"));
}

TEST(SafetensorsTest, ModuleRoundTripAndMismatch) {
  Generator g(0), h(1);
  auto a = *MakeModel("cnn_bn", g);
  auto b = *MakeModel("cnn_bn", h);
  const std::string path = TempPath("cnn_bn.safetensors");
  ASSERT_TRUE(SaveModuleToSafetensors(*a, path).ok());
  ASSERT_TRUE(LoadModuleFromSafetensors(*b, path).ok());
  const NamedTensors sa = a->StateDict(), sb = b->StateDict();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(Raw(sa[i].second), Raw(sb[i].second)) << sa[i].first;

  auto mlp = *MakeModel("mlp", g);
  absl::Status s = LoadModuleFromSafetensors(*mlp, path);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("\"fc3.weight\""));
  EXPECT_THAT(s.message(), HasSubstr("\"bn1.running_mean\""));
  EXPECT_THAT(s.message(), HasSubstr("\"fc1.weight\": checkpoint has float32 [128, 3136]"));
}

TEST(SafetensorsTest, SaveToBadDirectoryIsAnError) {
  absl::Status s = SaveSafetensors("/nonexistent-dir/x.safetensors", {{"a", Zeros({1})}});
  EXPECT_TRUE(absl::IsNotFound(s)) << s;  // io/file.h's codes
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent-dir/x.safetensors.tmp: No such file or directory"));
}

}  // namespace
}  // namespace ddp
