#include "comm/collective_tensors.h"

#include "base/check.h"

namespace ddp {

void CheckCpuCollectiveTensor(CollectiveKind kind, const char* backend, const Tensor& t, const char* hint) {
  DDP_CHECK(t.device().is_cpu()) << CollectiveKindName(kind) << " (" << backend << "): tensor on "
                                 << t.device().ToString() << "; the " << backend << " backend takes CPU tensors"
                                 << hint;
  DDP_CHECK(t.is_contiguous()) << CollectiveKindName(kind) << " (" << backend << "): tensor must be contiguous";
}

void CheckCollectiveList(const char* op, const char* what, const std::vector<Tensor>& list, size_t expected,
                         const Tensor& like) {
  DDP_CHECK(list.size() == expected) << op << ": " << list.size() << " " << what << " for a group of " << expected;
  for (const Tensor& t : list) {
    DDP_CHECK(t.numel() == like.numel() && t.dtype() == like.dtype())
        << op << ": " << what << " tensor " << ShapeToString(t.shape()) << " " << DTypeName(t.dtype())
        << " does not match " << ShapeToString(like.shape()) << " " << DTypeName(like.dtype());
  }
}

void CheckCollectiveRoot(const char* op, int root, int size) {
  DDP_CHECK(root >= 0 && root < size) << op << ": root " << root << " outside a group of " << size;
}

}  // namespace ddp
