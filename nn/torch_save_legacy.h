// torch.save's legacy format (PyTorch before 1.6, or _use_new_zipfile_serialization=False), read as data
// for nn/torch_save.h: not an archive but a stream of pickles followed by raw storages:
//   the magic number 0x1950a86a20f9469cfc6c, the protocol version 1001, a dict of the saving machine
//   (little_endian, type sizes), the saved object (tensors refer to storages by persistent ids
//   ("storage", torch.<Type>Storage, key, location, numel, view_metadata)), the sorted list of storage
//   keys; then, for each key in that order, its element count (8 bytes, little-endian) and its bytes.
#ifndef DDP_NN_TORCH_SAVE_LEGACY_H_
#define DDP_NN_TORCH_SAVE_LEGACY_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "io/pickle_reader.h"

namespace ddp {

// The bytes of one saved storage, and what to call it in messages ("archive/data/3", "storage 3").
struct SavedStorage {
  std::string name;
  absl::string_view data;
  bool compressed = false;  // a ZIP member not stored: its bytes are not the storage's
};

// The pickled magic number that starts a file in the legacy format.
extern const absl::string_view kTorchLegacyMagic;

// A legacy file's saved object and its storages by key.
struct LegacyTorchSave {
  PickleTree object;
  std::map<std::string, SavedStorage> storages;
};

// Reads the legacy file image `image` (which starts with kTorchLegacyMagic); `source` starts every error
// message. Element sizes come from the storage types the object's persistent ids name (`element_size`
// maps "torch FloatStorage" to 4, and gives 0 for a type it does not know). Errors (InvalidArgument): a
// pickle that does not read, another protocol version, a big-endian machine, a key without a persistent
// id or of two types, a record running past the end, bytes after the last record.
absl::StatusOr<LegacyTorchSave> ReadLegacyTorchSave(absl::string_view image, const std::string& source,
                                                    size_t (*element_size)(absl::string_view type));

}  // namespace ddp

#endif  // DDP_NN_TORCH_SAVE_LEGACY_H_
