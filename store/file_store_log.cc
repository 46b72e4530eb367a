#include "store/file_store_log.h"

#include "absl/strings/str_cat.h"
#include "store/byte_codec.h"

namespace ddp {

std::string EncodeFileRecord(FileRecordKind kind, absl::string_view key, absl::string_view value) {
  std::string out;
  out.reserve(13 + key.size() + value.size());
  AppendU8(&out, static_cast<uint8_t>(kind));
  AppendBytes(&out, key);
  AppendBytes(&out, value);
  AppendU32(&out, Fnv1a32(out));
  return out;
}

absl::Status ApplyFileRecords(absl::string_view data, uint64_t file_offset, size_t max_bytes,
                              KvTable* table) {
  ByteReader reader(data);
  while (reader.remaining() > 0) {
    const size_t start = reader.position();
    uint8_t kind = 0;
    std::string key, value;
    uint32_t checksum = 0;
    const bool complete = reader.ReadU8(&kind) && reader.ReadBytes(max_bytes, &key) &&
                          reader.ReadBytes(max_bytes, &value);
    const size_t body_end = reader.position();
    const bool valid = complete && reader.ReadU32(&checksum) &&
                       checksum == Fnv1a32(data.substr(start, body_end - start)) &&
                       (kind == static_cast<uint8_t>(FileRecordKind::kSet) ||
                        (kind == static_cast<uint8_t>(FileRecordKind::kDelete) && value.empty()));
    if (!valid) {
      return absl::DataLossError(absl::StrCat("file store: corrupt or truncated record at offset ",
                                              file_offset + start));
    }
    if (kind == static_cast<uint8_t>(FileRecordKind::kSet)) {
      table->Set(key, value);
    } else {
      table->Delete(key);
    }
  }
  return absl::OkStatus();
}

}  // namespace ddp
