#include "comm/collective_tensors.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {

std::string CollectivePayload(const Tensor& t) { return absl::StrCat(t.numel(), " ", DTypeName(t.dtype())); }

void CheckCpuCollectiveTensor(const char* op, absl::string_view backend, const Tensor& t, absl::string_view hint) {
  DDP_CHECK(t.device().is_cpu()) << op << " (" << backend << "): tensor on " << t.device().ToString() << "; the "
                                 << backend << " backend takes CPU tensors" << hint;
  DDP_CHECK(t.is_contiguous()) << op << " (" << backend << "): tensor must be contiguous";
}

void CheckMatchingCollectiveTensor(const char* op, absl::string_view backend, const Tensor& a, const Tensor& b) {
  CheckCpuCollectiveTensor(op, backend, b);
  DDP_CHECK(a.numel() == b.numel() && a.dtype() == b.dtype())
      << op << ": tensor " << ShapeToString(b.shape()) << " does not match " << ShapeToString(a.shape());
}

}  // namespace ddp
