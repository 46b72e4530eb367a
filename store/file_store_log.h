// The on-disk format of FileStore: a header followed by an append-only log of checksummed records.
//
//   file   := header record*
//   header := "DDPFSv1\n"                                  (8 bytes)
//   record := kind:u8 key_len:u32 key value_len:u32 value checksum:u32
// Integers are little-endian; kind is 1 (set) or 2 (delete, empty value); checksum is FNV-1a 32 over
// every byte of the record before it. The current state is the replay of the log from the start.
#ifndef DDP_STORE_FILE_STORE_LOG_H_
#define DDP_STORE_FILE_STORE_LOG_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "store/kv_table.h"

namespace ddp {

// The 8 bytes every FileStore file starts with.
inline constexpr absl::string_view kFileStoreHeader = "DDPFSv1\n";

// What a record does to the table.
enum class FileRecordKind : uint8_t { kSet = 1, kDelete = 2 };

// Returns the encoded bytes of one record. Pure.
std::string EncodeFileRecord(FileRecordKind kind, absl::string_view key, absl::string_view value);

// Parses `data` (the file's bytes from `file_offset` on, ending at a record boundary) and applies each
// record to `table`. Keys and values longer than `max_bytes` are corruption. Returns kDataLoss naming
// the file offset of the first bad or truncated record; records before it have been applied.
// Pure apart from `table`; REQUIRES: table != nullptr.
absl::Status ApplyFileRecords(absl::string_view data, uint64_t file_offset, size_t max_bytes,
                              KvTable* table);

}  // namespace ddp

#endif  // DDP_STORE_FILE_STORE_LOG_H_
