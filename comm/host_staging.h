// HostStaging: a CUDA tensor's round trip through host memory for a backend that moves host bytes only
// (ProcessGroupGloo's AllReduce and Broadcast; Note [Host staging] in comm/host_staging.cc). For CPU
// tensors it stages nothing, so the CPU path pays nothing but one check.
#ifndef DDP_COMM_HOST_STAGING_H_
#define DDP_COMM_HOST_STAGING_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tensor/tensor.h"

namespace ddp {

// One collective's staging of one tensor. Begin on the issuing thread, then CopyToHost and CopyBack on
// the backend's worker, in that order, once each. Not thread-safe (one worker uses it after Begin).
class HostStaging {
 public:
  // Called on the issuing thread when the collective is issued. For a CUDA tensor, records an event on
  // the calling thread's current stream of the tensor's device (Note [Current stream] in
  // tensor/cuda/context.h), so the copy later sees every kernel the caller enqueued before the call,
  // without blocking the caller. For a CPU tensor, records nothing. Errors: Internal naming the CUDA call
  // that failed. REQUIRES: `tensor` is contiguous; a CUDA tensor only in builds with --config=cuda.
  static absl::StatusOr<std::shared_ptr<HostStaging>> Begin(const Tensor& tensor);
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // True when the tensor lives on a CUDA device (and is staged through host memory).
  bool staged() const { return staged_; }

  // The host tensor the collective works on: the tensor itself on the CPU; for a CUDA tensor a new
  // host copy, made once the event recorded by Begin completed (polled, at most `timeout`). Errors:
  // DeadlineExceeded naming the device when the caller's work did not finish within `timeout`, Internal
  // for a CUDA failure.
  absl::StatusOr<Tensor> CopyToHost(absl::Duration timeout);

  // Copies the host tensor's values (the collective's result) back into the CUDA tensor and waits, at
  // most `timeout`, until the copy finished, so the result is in device memory when this returns.
  // Nothing for a CPU tensor. Errors as CopyToHost. REQUIRES: CopyToHost succeeded before.
  absl::Status CopyBack(absl::Duration timeout);

 private:
  explicit HostStaging(const Tensor& tensor);

  Tensor tensor_;         // the caller's tensor (kept alive until the collective completed)
  Tensor host_;           // the host copy, once CopyToHost ran (staged tensors only)
  bool staged_ = false;   // tensor_ is on a CUDA device
  void* ready_ = nullptr; // cudaEvent_t recorded by Begin (staged tensors only); owned
};

}  // namespace ddp

#endif  // DDP_COMM_HOST_STAGING_H_
