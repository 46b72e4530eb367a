#include "data/idx_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "io/file.h"

namespace ddp {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 32;  // far above any MNIST-like file

// Reads a whole file through zlib (which passes plain files through unchanged).
absl::StatusOr<std::vector<uint8_t>> ReadMaybeGzipped(const std::string& path) {
  if (absl::Status readable = CheckReadableFile(path); !readable.ok()) {
    if (!absl::IsNotFound(readable)) return readable;
    return absl::NotFoundError(absl::StrCat(
        path, ": ", std::strerror(ENOENT),
        " (Fashion-MNIST comes from the Debian package dataset-fashion-mnist; tools/setup.sh installs it)"));
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  while (true) {
    const int n = gzread(file, chunk, sizeof(chunk));
    if (n < 0) {
      int code = 0;
      std::string message = gzerror(file, &code);
      gzclose(file);
      return absl::DataLossError(absl::StrCat(path, ": corrupt gzip stream: ", message));
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  const int close_status = gzclose(file);
  if (close_status == Z_BUF_ERROR) {
    return absl::DataLossError(absl::StrCat(path, ": truncated gzip stream"));
  }
  if (close_status != Z_OK) return absl::DataLossError(absl::StrCat(path, ": gzip error ", close_status));
  return bytes;
}

uint32_t ReadBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

absl::StatusOr<IdxArray> ParseIdx(const std::string& name, const std::vector<uint8_t>& bytes) {
  if (bytes.size() < 4) {
    return absl::DataLossError(absl::StrCat(name, ": truncated: ", bytes.size(), " bytes, no IDX header"));
  }
  const uint32_t magic = ReadBigEndian32(bytes.data());
  const uint32_t ndims = magic & 0xffu;
  if ((magic >> 8) != 0x08u || ndims == 0 || ndims > 4) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": bad magic number 0x", absl::Hex(magic, absl::kZeroPad8),
                                                   " (expected 0x0000080N: unsigned bytes, N dims)"));
  }
  const size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) {
    return absl::DataLossError(absl::StrCat(name, ": truncated in the header (", bytes.size(), " bytes)"));
  }
  IdxArray array;
  int64_t total = 1;
  for (uint32_t i = 0; i < ndims; ++i) {
    const int64_t dim = ReadBigEndian32(bytes.data() + 4 + 4 * i);
    total *= dim;
    if (total > kMaxElements) return absl::InvalidArgumentError(absl::StrCat(name, ": implausible dimensions"));
    array.dims.push_back(dim);
  }
  const size_t expected = header + static_cast<size_t>(total);
  if (bytes.size() < expected) {
    return absl::DataLossError(absl::StrCat(name, ": truncated: dimensions need ", total, " data bytes, file has ",
                                            bytes.size() - header));
  }
  if (bytes.size() > expected) {
    return absl::DataLossError(absl::StrCat(name, ": ", bytes.size() - expected, " unexpected trailing bytes"));
  }
  array.data.assign(bytes.begin() + header, bytes.end());
  return array;
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path) {
  auto bytes = ReadMaybeGzipped(path);
  if (!bytes.ok()) return bytes.status();
  return ParseIdx(path, *bytes);
}

}  // namespace ddp
