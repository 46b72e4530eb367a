// Little-endian fixed-width integer and length-prefixed byte-string encoding, with a bounds-checked
// reader. Shared by the TCP store protocol and the file store's record format.
#ifndef DDP_STORE_BYTE_CODEC_H_
#define DDP_STORE_BYTE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace ddp {

// Appends `v` as 1, 4 or 8 little-endian bytes to `out`.
void AppendU8(std::string* out, uint8_t v);
void AppendU32(std::string* out, uint32_t v);
void AppendI64(std::string* out, int64_t v);
// Appends a u32 length followed by the bytes. REQUIRES: bytes.size() < 2^32.
void AppendBytes(std::string* out, absl::string_view bytes);

// Reads the same encodings from a byte buffer, never past its end. Each Read* returns false (and
// leaves the output unspecified) when the buffer is too short or a length exceeds `max_len`.
// Does not own the buffer. Not thread-safe.
class ByteReader {
 public:
  explicit ByteReader(absl::string_view data) : data_(data) {}

  bool ReadU8(uint8_t* v);
  bool ReadU32(uint32_t* v);
  bool ReadI64(int64_t* v);
  // Reads a u32 length and that many bytes; fails when the length is above `max_len`.
  bool ReadBytes(size_t max_len, std::string* out);
  // Reads exactly `n` raw bytes.
  bool ReadRaw(size_t n, absl::string_view* out);

  size_t remaining() const { return data_.size() - pos_; }
  size_t position() const { return pos_; }

 private:
  absl::string_view data_;
  size_t pos_ = 0;
};

// 32-bit FNV-1a hash of `data` (record checksums; detects corruption, not an attacker).
uint32_t Fnv1a32(absl::string_view data);

}  // namespace ddp

#endif  // DDP_STORE_BYTE_CODEC_H_
