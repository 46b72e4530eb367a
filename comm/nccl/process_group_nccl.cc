#include "comm/nccl/process_group_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/collective_description.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

// Returns an Internal status naming the NCCL call, file and line when it fails.
#define DDP_NCCL_RETURN_IF_ERROR(expr)                                                                     \
  do {                                                                                                     \
    const ncclResult_t ddp_nccl_result_ = (expr);                                                          \
    if (ddp_nccl_result_ != ncclSuccess) {                                                                 \
      return absl::InternalError(absl::StrCat(__FILE__, ":", __LINE__, ": ", #expr, ": ",                   \
                                              ncclGetErrorString(ddp_nccl_result_), " (", ncclGetLastError(nullptr), ")")); \
    }                                                                                                      \
  } while (0)

namespace ddp {

// The communicator, its stream and its abort state, shared by the group and its Works (a Work may
// outlive the group's collectives but not the process). Thread-safe.
class NcclCommunicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int device) : comm_(comm), stream_(stream), device_(device) {}
  ~NcclCommunicator() {
    cuda::DeviceGuard guard(device_);
    if (!aborted_.load()) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    if (anchor_ != nullptr) cudaEventDestroy(anchor_);
    cudaStreamDestroy(stream_);
  }
  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

  // OK, or the asynchronous error / abort that broke the communicator.
  absl::Status Health() {
    if (aborted_.load()) return absl::AbortedError("NCCL communicator was aborted after a timeout or error");
    ncclResult_t async = ncclSuccess;
    DDP_NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      return absl::InternalError(absl::StrCat("asynchronous NCCL error: ", ncclGetErrorString(async), " (",
                                              ncclGetLastError(comm_), ")"));
    }
    return absl::OkStatus();
  }

  // Note [Device clock]: statistics and traces run on host wall-clock times, which say nothing about
  // when an asynchronous kernel ran. An anchor event recorded on the stream (and waited for) at creation
  // pairs a device instant with a host time; a later event's host time is the anchor's plus the
  // elapsed device time between the two (cudaEventElapsedTime), so a collective's start and end are
  // the device's, in the host's clock. InfinitePast() while `event` has not completed.
  absl::Status RecordAnchor() {
    DDP_CUDA_RETURN_IF_ERROR(cudaEventCreate(&anchor_));
    DDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(anchor_, stream_));
    DDP_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(anchor_));
    anchor_time_ = absl::Now();
    return absl::OkStatus();
  }
  absl::Time DeviceTime(cudaEvent_t event) const {
    float ms = 0.0f;
    if (anchor_ == nullptr || event == nullptr || cudaEventQuery(event) != cudaSuccess ||
        cudaEventElapsedTime(&ms, anchor_, event) != cudaSuccess) {
      return absl::InfinitePast();
    }
    return anchor_time_ + absl::Microseconds(static_cast<int64_t>(ms * 1000.0f));
  }

  // Aborts the communicator once (pending NCCL kernels return; every later call fails).
  void Abort() {
    bool expected = false;
    if (aborted_.compare_exchange_strong(expected, true)) ncclCommAbort(comm_);
  }

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  int device_;
  std::atomic<bool> aborted_{false};
  cudaEvent_t anchor_ = nullptr;  // Note [Device clock]
  absl::Time anchor_time_;
};

namespace {

// The Work of one NCCL collective: completion is the event recorded on the communication stream.
class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator> comm, std::string description, std::vector<Tensor> keep_alive)
      : comm_(std::move(comm)), description_(std::move(description)), keep_alive_(std::move(keep_alive)),
        started_(absl::Now()) {}
  ~NcclWork() override {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (end_ != nullptr) cudaEventDestroy(end_);
  }

  // Creates the events; called once before the collective is launched.
  absl::Status Init() {
    DDP_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_));
    DDP_CUDA_RETURN_IF_ERROR(cudaEventCreate(&end_));
    return absl::OkStatus();
  }
  cudaEvent_t start_event() const { return start_; }
  cudaEvent_t end_event() const { return end_; }
  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    failed_ = std::move(status);
  }

  bool IsCompleted() override {
    {
      absl::MutexLock lock(&mu_);
      if (!failed_.ok() || done_) return true;
    }
    if (cudaEventQuery(end_) != cudaSuccess) return false;
    MarkDone();
    return true;
  }

  absl::Status Wait(absl::Duration timeout) override {
    {
      absl::MutexLock lock(&mu_);
      if (!failed_.ok()) return failed_;
      if (done_) return absl::OkStatus();
    }
    const absl::Time deadline = absl::Now() + timeout;
    absl::Duration backoff = absl::Microseconds(20);
    for (;;) {
      const cudaError_t query = cudaEventQuery(end_);
      if (query == cudaSuccess) {
        MarkDone();
        return absl::OkStatus();
      }
      if (query != cudaErrorNotReady) {
        return Failed(cuda::CudaErrorStatus(query, "cudaEventQuery(end)", __FILE__, __LINE__));
      }
      absl::Status health = comm_->Health();
      if (!health.ok()) return Failed(health);
      if (absl::Now() >= deadline) {
        comm_->Abort();
        return Failed(absl::DeadlineExceededError(absl::StrCat(
            description_, ": not completed after ", absl::FormatDuration(timeout), "; NCCL communicator aborted")));
      }
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Milliseconds(1));
    }
  }

  absl::Status WaitStream() override {
    {
      absl::MutexLock lock(&mu_);
      if (!failed_.ok()) return failed_;
    }
    DDP_RETURN_IF_ERROR(comm_->Health());
    cuda::DeviceGuard guard(comm_->device());
    DDP_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(cuda::CurrentStream(comm_->device()), end_, 0));
    return absl::OkStatus();
  }

  double ExecutionSeconds() const override {
    float ms = 0.0f;
    if (cudaEventQuery(end_) != cudaSuccess || cudaEventElapsedTime(&ms, start_, end_) != cudaSuccess) return 0.0;
    return ms / 1000.0;
  }
  // The device's start and end of the collective in host time (Note [Device clock]); before the device
  // finished, the host's issue time and InfinitePast().
  absl::Time StartTime() const override {
    const absl::Time device = comm_->DeviceTime(start_);
    return device == absl::InfinitePast() ? started_ : device;
  }
  absl::Time EndTime() const override {
    const absl::Time device = comm_->DeviceTime(end_);
    if (device != absl::InfinitePast()) return device;
    absl::MutexLock lock(&mu_);
    return ended_;
  }

 private:
  void MarkDone() {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    done_ = true;
    ended_ = absl::Now();
    keep_alive_.clear();  // the device no longer reads or writes them
  }
  absl::Status Failed(absl::Status status) {
    absl::MutexLock lock(&mu_);
    failed_ = status;
    return status;
  }

  std::shared_ptr<NcclCommunicator> comm_;
  const std::string description_;
  std::vector<Tensor> keep_alive_;  // released once completed (guarded by mu_ after construction)
  const absl::Time started_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  absl::Time ended_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// A Work that failed before anything was launched.
class FailedWork : public Work {
 public:
  explicit FailedWork(absl::Status status) : status_(std::move(status)) {}
  bool IsCompleted() override { return true; }
  absl::Status Wait(absl::Duration) override { return status_; }
  absl::Status WaitStream() override { return status_; }

 private:
  absl::Status status_;
};

absl::StatusOr<ncclDataType_t> NcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kInt64: return ncclInt64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
  }
  return absl::InvalidArgumentError("unsupported dtype for NCCL");
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProduct: return ncclProd;
  }
  return ncclSum;
}

absl::Status CheckTensor(const Tensor& t, int device, const char* what) {
  if (!t.defined() || !t.device().is_cuda() || t.device().index != device) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": NCCL needs tensors on cuda:", device, ", got ",
                                                   t.defined() ? t.device().ToString() : "undefined"));
  }
  if (!t.is_contiguous()) return absl::InvalidArgumentError(absl::StrCat(what, ": tensor must be contiguous"));
  return NcclType(t.dtype()).status();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroupNccl>> ProcessGroupNccl::Create(Store& store, int rank, int size,
                                                                           const ProcessGroupNcclOptions& options) {
  DDP_CHECK(rank >= 0 && rank < size) << "ProcessGroupNccl: rank " << rank << " of " << size;
  DDP_RETURN_IF_ERROR(cuda::CudaDeviceAvailable());
  DDP_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  ncclUniqueId id;
  const std::string key = "nccl_unique_id";
  if (rank == 0) {
    DDP_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    DDP_RETURN_IF_ERROR(store.Set(key, std::string(id.internal, sizeof(id.internal))));
  } else {
    DDP_ASSIGN_OR_RETURN(std::string bytes, store.Get(key, options.timeout));
    if (bytes.size() != sizeof(id.internal)) {
      return absl::DataLossError(absl::StrCat("store key ", key, " holds ", bytes.size(), " bytes, expected ",
                                              sizeof(id.internal)));
    }
    std::copy(bytes.begin(), bytes.end(), id.internal);
  }
  ncclComm_t comm = nullptr;
  DDP_NCCL_RETURN_IF_ERROR(ncclCommInitRank(&comm, size, id, rank));
  cudaStream_t stream = nullptr;
  const cudaError_t created = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (created != cudaSuccess) {
    ncclCommDestroy(comm);
    return cuda::CudaErrorStatus(created, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
  }
  auto shared = std::make_shared<NcclCommunicator>(comm, stream, options.device);
  DDP_RETURN_IF_ERROR(shared->RecordAnchor());
  return std::unique_ptr<ProcessGroupNccl>(new ProcessGroupNccl(std::move(shared), rank, size, options));
}

ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<NcclCommunicator> comm, int rank, int size,
                                   ProcessGroupNcclOptions options)
    : comm_(std::move(comm)), rank_(rank), size_(size), options_(options) {
  NcclCommunicator* raw = comm_.get();
  CollectiveWatchdogOptions watchdog_options;
  watchdog_options.timeout = options_.timeout;
  watchdog_ = std::make_unique<CollectiveWatchdog>(
      absl::StrCat("rank ", rank_, "/", size_, " (nccl)"),
      CommunicatorProbe{[raw] { return raw->Health(); }, [raw] { raw->Abort(); }}, watchdog_options);
}

ProcessGroupNccl::~ProcessGroupNccl() = default;

namespace {

// Orders the communication stream after the caller's stream, runs `launch` on it between the Work's
// events (Note [NCCL streams]).
// Once launched, the watchdog polls the Work's completion against the group's timeout (Note [Collective
// watchdog]), so a hang fails it and every later collective even when nobody waits on the host.
std::shared_ptr<Work> Launch(const std::shared_ptr<NcclCommunicator>& comm, CollectiveWatchdog& watchdog,
                             std::string description, std::vector<Tensor> keep_alive,
                             const std::function<absl::Status()>& launch) {
  absl::Status health = watchdog.health();
  if (health.ok()) health = comm->Health();
  if (!health.ok()) return std::make_shared<FailedWork>(absl::Status(health.code(), absl::StrCat(description, ": ", health.message())));
  auto work = std::make_shared<NcclWork>(comm, description, std::move(keep_alive));
  auto run = [&]() -> absl::Status {
    cuda::DeviceGuard guard(comm->device());
    DDP_RETURN_IF_ERROR(work->Init());
    cudaEvent_t ready = nullptr;
    DDP_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    DDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready, cuda::CurrentStream(comm->device())));
    DDP_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(comm->stream(), ready, 0));
    DDP_CUDA_RETURN_IF_ERROR(cudaEventDestroy(ready));  // released once the wait is satisfied
    DDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(work->start_event(), comm->stream()));
    DDP_RETURN_IF_ERROR(launch());
    DDP_CUDA_RETURN_IF_ERROR(cudaEventRecord(work->end_event(), comm->stream()));
    return absl::OkStatus();
  };
  absl::Status status = run();
  if (!status.ok()) {
    work->Fail(absl::Status(status.code(), absl::StrCat(description, ": ", status.message())));
    return work;
  }
  watchdog.Watch(description, [work] { return work->IsCompleted(); },
                 [work](const absl::Status& failure) { work->Fail(failure); });
  return work;
}

// The call's description (comm/collective_description.h), before its tensor was checked: an undefined
// tensor reads "0 ?".
std::string Describe(const char* name, int64_t sequence, const Tensor& t, int rank, int size) {
  const std::string payload =
      t.defined() ? absl::StrCat(t.numel(), " ", DTypeName(t.dtype())) : std::string("0 ?");
  return DescribeCall(name, sequence, payload, rank, size, "nccl");
}

}  // namespace

std::shared_ptr<Work> ProcessGroupNccl::AllReduce(const Tensor& tensor, ReduceOp op) {
  absl::MutexLock lock(&issue_mu_);
  const std::string description = Describe("AllReduce", next_sequence_++, tensor, rank_, size_);
  absl::Status valid = CheckTensor(tensor, options_.device, description.c_str());
  if (!valid.ok()) return std::make_shared<FailedWork>(valid);
  NcclCommunicator* comm = comm_.get();
  return Launch(comm_, *watchdog_, description, {tensor}, [&]() -> absl::Status {
    DDP_NCCL_RETURN_IF_ERROR(ncclAllReduce(tensor.raw_data(), tensor.raw_data(), tensor.numel(),
                                           NcclType(tensor.dtype()).value(), NcclOp(op), comm->comm(),
                                           comm->stream()));
    return absl::OkStatus();
  });
}

std::shared_ptr<Work> ProcessGroupNccl::Broadcast(const Tensor& tensor, int root) {
  absl::MutexLock lock(&issue_mu_);
  const std::string description = Describe("Broadcast", next_sequence_++, tensor, rank_, size_);
  absl::Status valid = CheckTensor(tensor, options_.device, description.c_str());
  if (!valid.ok()) return std::make_shared<FailedWork>(valid);
  NcclCommunicator* comm = comm_.get();
  return Launch(comm_, *watchdog_, description, {tensor}, [&]() -> absl::Status {
    DDP_NCCL_RETURN_IF_ERROR(ncclBroadcast(tensor.raw_data(), tensor.raw_data(), tensor.numel(),
                                           NcclType(tensor.dtype()).value(), root, comm->comm(), comm->stream()));
    return absl::OkStatus();
  });
}

std::shared_ptr<Work> ProcessGroupNccl::AllGather(const std::vector<Tensor>& outputs, const Tensor& input) {
  absl::MutexLock lock(&issue_mu_);
  const std::string description = Describe("AllGather", next_sequence_++, input, rank_, size_);
  absl::Status valid = CheckTensor(input, options_.device, description.c_str());
  if (valid.ok() && static_cast<int>(outputs.size()) != size_) {
    valid = absl::InvalidArgumentError(absl::StrCat(description, ": ", outputs.size(), " outputs for ", size_, " ranks"));
  }
  for (const Tensor& out : outputs) {
    if (!valid.ok()) break;
    valid = CheckTensor(out, options_.device, description.c_str());
    if (valid.ok() && (out.numel() != input.numel() || out.dtype() != input.dtype())) {
      valid = absl::InvalidArgumentError(absl::StrCat(description, ": output shape or dtype differs from input"));
    }
  }
  if (!valid.ok()) return std::make_shared<FailedWork>(valid);
  // Gather into one flat buffer, then copy each rank's slice out on the communication stream.
  Tensor flat = Tensor::Empty({input.numel() * size_}, input.dtype(), input.device());
  std::vector<Tensor> keep = outputs;
  keep.push_back(input);
  keep.push_back(flat);
  NcclCommunicator* comm = comm_.get();
  return Launch(comm_, *watchdog_, description, keep, [&]() -> absl::Status {
    DDP_NCCL_RETURN_IF_ERROR(ncclAllGather(input.raw_data(), flat.raw_data(), input.numel(),
                                           NcclType(input.dtype()).value(), comm->comm(), comm->stream()));
    const size_t bytes = input.nbytes();
    for (int r = 0; r < size_; ++r) {
      DDP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(outputs[r].raw_data(), static_cast<char*>(flat.raw_data()) + r * bytes,
                                               bytes, cudaMemcpyDeviceToDevice, comm->stream()));
    }
    return absl::OkStatus();
  });
}

std::shared_ptr<Work> ProcessGroupNccl::ReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                      ReduceOp op) {
  absl::MutexLock lock(&issue_mu_);
  const std::string description = Describe("ReduceScatter", next_sequence_++, output, rank_, size_);
  absl::Status valid = CheckTensor(output, options_.device, description.c_str());
  if (valid.ok() && static_cast<int>(inputs.size()) != size_) {
    valid = absl::InvalidArgumentError(absl::StrCat(description, ": ", inputs.size(), " inputs for ", size_, " ranks"));
  }
  for (const Tensor& in : inputs) {
    if (!valid.ok()) break;
    valid = CheckTensor(in, options_.device, description.c_str());
    if (valid.ok() && (in.numel() != output.numel() || in.dtype() != output.dtype())) {
      valid = absl::InvalidArgumentError(absl::StrCat(description, ": input shape or dtype differs from output"));
    }
  }
  if (!valid.ok()) return std::make_shared<FailedWork>(valid);
  Tensor flat = Tensor::Empty({output.numel() * size_}, output.dtype(), output.device());
  std::vector<Tensor> keep = inputs;
  keep.push_back(output);
  keep.push_back(flat);
  NcclCommunicator* comm = comm_.get();
  return Launch(comm_, *watchdog_, description, keep, [&]() -> absl::Status {
    const size_t bytes = output.nbytes();
    for (int r = 0; r < size_; ++r) {
      DDP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<char*>(flat.raw_data()) + r * bytes, inputs[r].raw_data(),
                                               bytes, cudaMemcpyDeviceToDevice, comm->stream()));
    }
    DDP_NCCL_RETURN_IF_ERROR(ncclReduceScatter(flat.raw_data(), output.raw_data(), output.numel(),
                                               NcclType(output.dtype()).value(), NcclOp(op), comm->comm(),
                                               comm->stream()));
    return absl::OkStatus();
  });
}

std::shared_ptr<Work> ProcessGroupNccl::Reduce(const Tensor& tensor, int root, ReduceOp op) {
  absl::MutexLock lock(&issue_mu_);
  const std::string description = Describe("Reduce", next_sequence_++, tensor, rank_, size_);
  absl::Status valid = CheckTensor(tensor, options_.device, description.c_str());
  if (!valid.ok()) return std::make_shared<FailedWork>(valid);
  NcclCommunicator* comm = comm_.get();
  return Launch(comm_, *watchdog_, description, {tensor}, [&]() -> absl::Status {
    DDP_NCCL_RETURN_IF_ERROR(ncclReduce(tensor.raw_data(), tensor.raw_data(), tensor.numel(),
                                        NcclType(tensor.dtype()).value(), NcclOp(op), root, comm->comm(),
                                        comm->stream()));
    return absl::OkStatus();
  });
}

std::shared_ptr<Work> ProcessGroupNccl::Barrier() {
  // An all-reduce of one float on the device: completes once every rank reached it.
  Tensor token = Zeros({1}, DType::kFloat32, Device::CUDA(options_.device));
  return AllReduce(token, ReduceOp::kSum);
}

}  // namespace ddp
