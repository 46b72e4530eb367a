// ZIP archives of stored (uncompressed) members: the container of torch.save's files (nn/torch_save.h),
// read from a whole-file image and written to one.
//
// Note [Stored ZIP archives]
// torch.save writes a ZIP archive whose members are stored, not compressed, each member's data aligned
// to 64 bytes by padding in its local header's extra field, with ZIP64 end records always present and
// sizes and CRC-32s in data descriptors after each member (so its local header may carry zeros). The
// reader therefore trusts only the central directory for names, sizes, offsets and CRC-32s, and checks
// everything against the image: one archive on one disk; the end records inside the file and consistent
// with each other; every member not encrypted, its local header present with the same name, its data
// inside the part of the file before the central directory; names unique; a stored member's CRC-32
// matching. A compressed member (other tools' archives, a TorchScript archive's code) is listed with its
// method and compressed bytes, for the caller to refuse when it needs its contents. ZIP64 extra fields
// replace the 32-bit sizes and offsets that hold 0xffffffff. A failure is an InvalidArgument error naming the
// archive and, where there is one, the member. Members' data are views into the image, never copies. The
// writer makes the same layout as torch.save (stored members aligned, ZIP64 end records), with ZIP64 extra
// fields only where a size or offset needs them, no timestamps, and no data descriptors, so the same members
// make the same bytes.
#ifndef DDP_IO_ZIP_ARCHIVE_H_
#define DDP_IO_ZIP_ARCHIVE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp {

// One member: its name (a path inside the archive, "/"-separated) and its bytes.
struct ZipMember {
  std::string name;
  absl::string_view data;      // when compression_method != 0, the compressed bytes, unchecked
  int compression_method = 0;  // 0: stored
};

// The members of the archive `image`, in central-directory order, as Note [Stored ZIP archives] says.
// `what` (e.g. the file's path) starts every error message. The views point into `image`.
absl::StatusOr<std::vector<ZipMember>> ReadZipArchive(absl::string_view image, const std::string& what);

// The member named `name` of `members`, or null.
const ZipMember* FindZipMember(const std::vector<ZipMember>& members, absl::string_view name);

// How WriteZipArchive lays members out.
struct ZipWriteOptions {
  size_t alignment = 64;     // each member's data starts at a multiple of this (a power of two, <= 4096)
  bool force_zip64 = false;  // ZIP64 extra fields on every member, as if each were beyond 4 GiB
};

// The archive of `members`, stored, in the given order. REQUIRES: names unique and non-empty, and
// `options.alignment` a power of two no larger than 4096.
std::string WriteZipArchive(const std::vector<ZipMember>& members, const ZipWriteOptions& options = {});

}  // namespace ddp

#endif  // DDP_IO_ZIP_ARCHIVE_H_
