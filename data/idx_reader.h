// Reader for the IDX format of MNIST / Fashion-MNIST (optionally gzip-compressed).
#ifndef DDP_DATA_IDX_READER_H_
#define DDP_DATA_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddp {

// A decoded IDX file of unsigned bytes: its dimensions and its data in row-major order.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

// Reads an IDX file of type unsigned byte (magic 0x0000080N, N = number of dimensions), gzip-compressed
// or plain. Validates the magic number, the dimensions and that the data is exactly as long as the
// dimensions say. Errors name the file and the problem (missing, truncated, bad magic, trailing bytes).
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path);

// Decodes an in-memory (already decompressed) IDX buffer; `name` is used in error messages.
absl::StatusOr<IdxArray> ParseIdx(const std::string& name, const std::vector<uint8_t>& bytes);

}  // namespace ddp

#endif  // DDP_DATA_IDX_READER_H_
