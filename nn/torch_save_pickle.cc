// Contracts: nn/torch_save_pickle.h. Opcodes: Python's Lib/pickletools.py.
#include "nn/torch_save_pickle.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

// Appends pickle opcodes to a string.
class PickleWriter {
 public:
  void Proto2() { out_ += "\x80\x02"; }
  void Global(const char* module, const char* name) { absl::StrAppend(&out_, "c", module, "\n", name, "\n"); }
  void Text(const std::string& s) {
    out_ += 'X';
    Unsigned(s.size(), 4);
    out_ += s;
  }
  void Int(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      Unsigned(static_cast<uint32_t>(v), 4);
      return;
    }
    out_ += "\x8a\x08";  // LONG1, 8 bytes of two's complement
    Unsigned(static_cast<uint64_t>(v), 8);
  }
  void Op(char op) { out_ += op; }
  std::string Take() { return std::move(out_); }

 private:
  void Unsigned(uint64_t v, int width) {
    for (int i = 0; i < width; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

constexpr char kMark = '(', kTuple = 't', kEmptyTuple = ')', kReduce = 'R', kBinPersId = 'Q';
constexpr char kNewFalse = '\x89', kSetItems = 'u', kStop = '.';

const char* StorageName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "FloatStorage";
    case DType::kInt64:
      return "LongStorage";
    case DType::kFloat16:
      return "HalfStorage";
    case DType::kBFloat16:
      return "BFloat16Storage";
  }
  return "FloatStorage";
}

void EmptyOrderedDict(PickleWriter& w) {
  w.Global("collections", "OrderedDict");
  w.Op(kEmptyTuple);
  w.Op(kReduce);
}

void IntTuple(PickleWriter& w, const Shape& values) {
  w.Op(kMark);
  for (int64_t v : values) w.Int(v);
  w.Op(kTuple);
}

void PickleTensor(PickleWriter& w, const Tensor& t, size_t index) {
  w.Global("torch._utils", "_rebuild_tensor_v2");
  w.Op(kMark);
  w.Op(kMark);  // the storage's persistent id
  w.Text("storage");
  w.Global("torch", StorageName(t.dtype()));
  w.Text(absl::StrCat(index));
  w.Text("cpu");
  w.Int(t.numel());
  w.Op(kTuple);
  w.Op(kBinPersId);
  w.Int(0);  // storage offset
  IntTuple(w, t.shape());
  IntTuple(w, ContiguousStrides(t.shape()));
  w.Op(kNewFalse);      // requires_grad
  EmptyOrderedDict(w);  // backward hooks
  w.Op(kTuple);
  w.Op(kReduce);
}

}  // namespace

std::string TorchStateDictPickle(const NamedTensors& tensors) {
  PickleWriter w;
  w.Proto2();
  EmptyOrderedDict(w);
  w.Op(kMark);
  for (size_t i = 0; i < tensors.size(); ++i) {
    w.Text(tensors[i].first);
    PickleTensor(w, tensors[i].second, i);
  }
  w.Op(kSetItems);
  w.Op(kStop);
  return w.Take();
}

}  // namespace ddp
