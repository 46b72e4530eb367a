// Error policy of the whole engine (docs/checkpoints_and_faults.md, "The error policy"):
//   * What can fail at run time (I/O, rendezvous, bad input files or flags, a peer gone, a timeout)
//     returns absl::Status / absl::StatusOr<T>, with a message that names what was wrong.
//   * A broken invariant or a programming error (shape mismatch passed to an op, a dtype an op does not
//     support, use of an undefined tensor) stops the process through DDP_CHECK with file, line and the
//     streamed message, as PyTorch's TORCH_CHECK does for the same class of errors.
#ifndef DDP_BASE_CHECK_H_
#define DDP_BASE_CHECK_H_

#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ddp {
namespace internal {

// Collects a failure message and aborts the process in its destructor. Used only through DDP_CHECK.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Makes `DDP_CHECK(c) << x` a void expression in both branches of the ternary.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace ddp

// Aborts with "file:line: Check failed: cond: <streamed message>" when `cond` is false.
#define DDP_CHECK(cond)                 \
  (cond) ? (void)0                      \
         : ::ddp::internal::Voidify() & \
               ::ddp::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

// Returns the status of `expr` from the enclosing function when it is not OK.
#define DDP_RETURN_IF_ERROR(expr)                 \
  do {                                            \
    ::absl::Status ddp_status_ = (expr);          \
    if (!ddp_status_.ok()) return ddp_status_;    \
  } while (0)

#define DDP_STATUS_CONCAT_INNER(a, b) a##b
#define DDP_STATUS_CONCAT(a, b) DDP_STATUS_CONCAT_INNER(a, b)

// `DDP_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a StatusOr or returns its error status.
#define DDP_ASSIGN_OR_RETURN(lhs, expr) \
  DDP_ASSIGN_OR_RETURN_IMPL(DDP_STATUS_CONCAT(ddp_statusor_, __LINE__), lhs, expr)
#define DDP_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // DDP_BASE_CHECK_H_
