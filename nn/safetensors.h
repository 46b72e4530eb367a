// Reading and writing safetensors files (https://github.com/huggingface/safetensors), the checkpoint
// format shared with PyTorch:
//   8 bytes: N, the header length, unsigned little-endian
//   N bytes: a JSON object {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//            ..., "__metadata__": {"<key>": "<string value>"}}, padded with spaces to a multiple of 8
//   the data: each tensor's bytes, row-major, little-endian, at [begin, end) from the end of the header.
// Supported dtypes: F32, I64, F16, BF16 (tensor/dtype.h). Loading validates the whole file and never
// trusts it: every failure is a Status naming the file and, where there is one, the tensor.
// File I/O and its errors are io/file.h's.
// Thread safety: the functions share no state; concurrent calls on different paths are safe.
#ifndef DDP_NN_SAFETENSORS_H_
#define DDP_NN_SAFETENSORS_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nn/module.h"
#include "tensor/tensor.h"

namespace ddp {

// String-to-string metadata stored under "__metadata__".
using SafetensorsMetadata = std::map<std::string, std::string>;

// The contents of a file: tensors in file (data offset) order, plus metadata.
struct SafetensorsContents {
  NamedTensors tensors;
  SafetensorsMetadata metadata;
};

// Serialises tensors (any device, layout or supported dtype; copied to contiguous host memory) in the
// given order. Errors: an empty, duplicate or reserved ("__metadata__") name.
absl::StatusOr<std::string> SerializeSafetensors(const NamedTensors& tensors,
                                                 const SafetensorsMetadata& metadata = {});
// Parses and validates a whole file image. `source` names the data in error messages (a path).
// Rejects: fewer than 8 bytes; a header length beyond the data; a header that is not a JSON object;
// entries without a valid dtype, shape or data_offsets; offsets out of range, overlapping, leaving holes
// or not matching shape x dtype size; bytes after the last tensor; non-string metadata.
// With `owner` (what keeps `bytes` alive, e.g. a MappedFile: io/file.h) the tensors are views of `bytes`
// that share `owner`, not copies.
absl::StatusOr<SafetensorsContents> ParseSafetensors(absl::string_view bytes, const std::string& source,
                                                     std::shared_ptr<const void> owner = nullptr);

// Writes a file atomically (WriteFileAtomically, io/file.h): to "<path>.tmp", fsync, rename over
// `path`, fsync of the directory. On error `path` is untouched (the temporary is removed); I/O errors
// name the path and the errno text, with io/file.h's codes (NotFound for a missing directory, ...).
absl::Status SaveSafetensors(const std::string& path, const NamedTensors& tensors,
                             const SafetensorsMetadata& metadata = {});
// Reads and validates a file (see ParseSafetensors). NotFound when it does not exist.
absl::StatusOr<NamedTensors> LoadSafetensors(const std::string& path);
// Reads and validates a file, with its metadata.
absl::StatusOr<SafetensorsContents> ReadSafetensors(const std::string& path);

// Saves module.StateDict() (parameters and buffers under their dotted names).
absl::Status SaveModuleToSafetensors(const Module& module, const std::string& path,
                                     const SafetensorsMetadata& metadata = {});
// Loads a file into module.LoadStateDict(strict): values are copied into the existing tensors. An error
// names the file and each missing, unexpected or mismatching (shape or dtype) tensor.
absl::Status LoadModuleFromSafetensors(Module& module, const std::string& path, bool strict = true);

}  // namespace ddp

#endif  // DDP_NN_SAFETENSORS_H_
