// state_dicts in torch.save's file format, the one a PyTorch user has (`torch.save(model.state_dict(),
// "model.pt")`, the weights torchvision and others publish): read without running Python, and written so
// that `torch.load` reads them (weights_only or not) with nothing beyond torch installed.
//
// Note [torch.save files read as data]
// Since PyTorch 1.6 torch.save writes a ZIP archive (io/zip_archive.h) holding `<name>/data.pkl`, a
// pickle of the saved object (io/pickle_reader.h reads it without calling anything), and one member
// `<name>/data/<key>` per storage, raw little-endian bytes. In the pickle a tensor is
// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) (or
// _rebuild_parameter around one), its storage a persistent id ("storage", torch.<Type>Storage, key,
// location, numel). The reader takes:
//   - what it holds: a state_dict (a dict, usually an OrderedDict, of names to tensors); or a dict with
//     exactly one state_dict among its values, as training checkpoints hold {"epoch": 3, "model": {...},
//     "optimizer": {...}}: that one is taken and a note says under which key. Anything else (a whole
//     module saved with torch.save(model), a checkpoint with two state_dicts, a TorchScript archive) is
//     refused with what it holds and what to save instead.
//   - the legacy format of PyTorch before 1.6 (nn/torch_save_legacy.h) as well: the same pickle, its
//     storages in the stream after it instead of archive members (and without checksums).
//   - names: when every name starts with "module." (a state_dict of a DDP- or DataParallel-wrapped
//     module) or "_orig_mod." (of torch.compile's wrapper), the prefix is removed, with a note.
//   - dtypes: float32, float16, bfloat16 and int64 as they are; float64 becomes float32 (rounded) and the
//     integer and bool types int64 (exactly), with a note, since the engine has no other dtypes; any other
//     (complex, quantized) is refused naming the tensor.
//   - views: a tensor's offset, size and stride select its elements from its storage (views of one
//     storage, transposes), gathered into a contiguous tensor; a storage shared by several tensors is
//     read once per tensor.
// Everything is checked against the file: the storage exists and holds numel elements of its
// type, every element the view selects lies inside it, sizes and strides are non-negative and their
// product does not overflow, byteorder (when recorded) is "little". Errors are InvalidArgument naming
// the file and, where there is one, the tensor.
#ifndef DDP_NN_TORCH_SAVE_H_
#define DDP_NN_TORCH_SAVE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nn/module.h"

namespace ddp {

// A state_dict read from a torch.save file: tensors in the file's order, and what was done to reach them
// (the key it was taken from, a prefix removed, dtypes converted), one sentence each.
struct TorchStateDict {
  NamedTensors tensors;
  std::vector<std::string> notes;
};

// True when `image` starts as a torch.save file of either format (a ZIP archive, or the legacy pickle
// sequence), so a caller can tell it from a safetensors file.
bool LooksLikeTorchSave(absl::string_view image);

// The state_dict in the torch.save file image `image`, as Note [torch.save files read as data] says;
// `source` (a path) starts every error message. A tensor stored contiguously in its dtype is a view of
// the image's bytes, not a copy (the image lives as long as such a tensor; tensors that share a storage
// in the file share it here); the others are copies.
absl::StatusOr<TorchStateDict> ParseTorchStateDict(std::string image, const std::string& source);
// The same for an image that `owner` keeps alive (a MappedFile, io/file.h): the views share `owner`.
absl::StatusOr<TorchStateDict> ParseTorchStateDict(std::shared_ptr<const void> owner, absl::string_view image,
                                                   const std::string& source);

// Reads and parses the file at `path` (io/file.h's errors for a missing or unreadable file).
absl::StatusOr<TorchStateDict> ReadTorchStateDict(const std::string& path);

// The torch.save file (archive name "archive") of `tensors` as an OrderedDict state_dict, each tensor
// contiguous in its own storage, as PyTorch 2.x lays it out; torch.load reads it with weights_only=True.
// Errors: an empty or duplicate name.
absl::StatusOr<std::string> SerializeTorchStateDict(const NamedTensors& tensors);

// Writes SerializeTorchStateDict(tensors) atomically (io/file.h's WriteFileAtomically).
absl::Status SaveTorchStateDict(const std::string& path, const NamedTensors& tensors);

}  // namespace ddp

#endif  // DDP_NN_TORCH_SAVE_H_
