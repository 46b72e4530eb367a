#include "store/byte_codec.h"

namespace ddp {

void AppendU8(std::string* out, uint8_t v) { out->push_back(static_cast<char>(v)); }

void AppendU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void AppendI64(std::string* out, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

void AppendBytes(std::string* out, absl::string_view bytes) {
  AppendU32(out, static_cast<uint32_t>(bytes.size()));
  out->append(bytes.data(), bytes.size());
}

bool ByteReader::ReadRaw(size_t n, absl::string_view* out) {
  if (remaining() < n) return false;
  *out = data_.substr(pos_, n);
  pos_ += n;
  return true;
}

bool ByteReader::ReadU8(uint8_t* v) {
  absl::string_view raw;
  if (!ReadRaw(1, &raw)) return false;
  *v = static_cast<uint8_t>(raw[0]);
  return true;
}

bool ByteReader::ReadU32(uint32_t* v) {
  absl::string_view raw;
  if (!ReadRaw(4, &raw)) return false;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>(static_cast<uint8_t>(raw[i])) << (8 * i);
  *v = r;
  return true;
}

bool ByteReader::ReadI64(int64_t* v) {
  absl::string_view raw;
  if (!ReadRaw(8, &raw)) return false;
  uint64_t r = 0;
  for (int i = 0; i < 8; ++i) r |= static_cast<uint64_t>(static_cast<uint8_t>(raw[i])) << (8 * i);
  *v = static_cast<int64_t>(r);
  return true;
}

bool ByteReader::ReadBytes(size_t max_len, std::string* out) {
  uint32_t len = 0;
  absl::string_view raw;
  if (!ReadU32(&len) || len > max_len || !ReadRaw(len, &raw)) return false;
  out->assign(raw.data(), raw.size());
  return true;
}

uint32_t Fnv1a32(absl::string_view data) {
  uint32_t h = 2166136261u;
  for (char c : data) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  return h;
}

}  // namespace ddp
