// A reader for Python pickles from other tools: the data pickles of CIFAR's Python versions
// (data/cifar_pickle.h) and the data.pkl of a torch.save archive (nn/torch_save.h), parsed into a tree of
// plain values, never executed.
//
// Note [Pickles read as data]
// A pickle is a program for Python's pickle machine: GLOBAL names any importable callable and REDUCE calls
// it, which is why Python's own documentation warns against loading untrusted pickles. This reader runs no
// callable. It knows the opcodes that Python 2's cPickle and Python 3's pickle (protocols 0-5 in-band)
// use for None, booleans, integers, floats, byte and text strings, lists, tuples and dicts, and for the
// objects (class instances, numpy arrays, tensors) that they build with GLOBAL + REDUCE or NEWOBJ + BUILD
// (the binary protocols 1-5, out-of-band buffers excepted; protocol 0's text opcodes are not taken); such
// an object is kept as a `kReduced` node holding the global's name, its arguments and its state, for the
// caller to interpret (data/cifar_pickle.h knows numpy's forms of an ndarray, nn/torch_save.h PyTorch's
// tensors). A persistent id (BINPERSID: how torch.save refers to a tensor's storage, kept in the archive
// beside the pickle) is kept as a `kPersistentId` node holding the id. Two calls are understood rather
// than kept: _codecs.encode(text, "latin1"), which is how Python 3 writes bytes at protocol 2, becomes
// those bytes, and collections.OrderedDict() becomes a dict (whose insertion order the tree keeps), with
// the attributes a BUILD gives it (a state_dict's _metadata) beside it. Any other opcode, a reference to a
// memo entry that does not exist, a length running past the end, more than PickleLimits allow, or a stack
// left unbalanced, is an InvalidArgument error naming the opcode and its offset. Strings are views into
// the input where they need no conversion, so a 30 MB array is not copied.
#ifndef DDP_DATA_PICKLE_READER_H_
#define DDP_DATA_PICKLE_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp {

// One value of an unpickled tree. A value may be referred to more than once (the memo lets a pickle
// reuse one, even inside itself); all of them are owned by their PickleTree.
struct PickleValue {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kBytes,
    kText,
    kList,
    kTuple,
    kDict,
    kGlobal,
    kReduced,
    kPersistentId
  };
  Kind kind = Kind::kNone;
  int64_t integer = 0;     // kBool (0 or 1), kInt
  double real = 0;         // kFloat
  absl::string_view text;  // kBytes, kText (UTF-8), kGlobal ("module name"): a view into the input or `owned`
  std::string owned;       // storage for a converted `text`, when it is not a view
  // kList, kTuple: the items; kDict: keys and values alternating, in insertion order; kReduced: the
  // callable (a kGlobal), its arguments (a kTuple), and its state when BUILD gave one; kPersistentId: the
  // id.
  std::vector<const PickleValue*> items;
  // kDict made by collections.OrderedDict(): the state a BUILD gave it (its attributes), else null.
  const PickleValue* attributes = nullptr;
};

// Every value one pickle made, and the one it returned.
struct PickleTree {
  std::vector<std::unique_ptr<PickleValue>> values;
  const PickleValue* root = nullptr;
};

// Bounds on what one pickle may make; beyond them the reader stops with an error.
struct PickleLimits {
  int64_t max_values = int64_t{1} << 20;  // values created (CIFAR-100's training file makes ~150,000)
  int64_t max_depth = 64;                 // nested marks
};

// The tree `bytes` unpickles to. Errors as Note [Pickles read as data] says; `what` (e.g. the file's
// path) prefixes every message. The returned views point into `bytes`, which must outlive them. Reading
// ends at the first STOP; when `end` is given it receives the offset just past it (where a stream of
// pickles, as torch.save's legacy format writes, continues).
absl::StatusOr<PickleTree> ReadPickle(absl::string_view bytes, const std::string& what,
                                      const PickleLimits& limits = {}, size_t* end = nullptr);

// The value under key `key` (a byte or text string) of dict `dict`, or null when it has none or is not a
// dict.
const PickleValue* PickleDictValue(const PickleValue& dict, absl::string_view key);

}  // namespace ddp

#endif  // DDP_DATA_PICKLE_READER_H_
