#include "comm/mpi/process_group_mpi.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/mpi/mpi_launch_check.h"
#include "comm/reduce_functions.h"
#include "base/check.h"

// Note [MPI worker thread]
// MPI is initialised once per process with MPI_THREAD_SERIALIZED: calls may come from any thread, never
// two at once. FUNNELED would not do, because the thread that initialises MPI (the caller of Create) is
// not the group's worker thread, which issues the collectives, nor the thread that finalises at exit.
// Every MPI call here holds MpiCallMutex(), so several groups (each with its own worker) and the exit
// handler never overlap. Each group works on its own duplicate of MPI_COMM_WORLD (MPI_Comm_idup), so
// groups never match each other's messages. A collective is one non-blocking call (MPI_Iallreduce,
// MPI_Ibcast, ...) followed by MPI_Test polls against the call's deadline: OpenMPI makes progress only
// inside MPI calls, so the poll spins for options.spin_before_yield, then yields the core between polls,
// and sleeps 50 us between polls once a wait passed options.yield_before_sleep (a rank still computing
// while the others wait). Sleeping earlier would starve a large collective of progress: a 64 MiB
// all-reduce needs thousands of progress calls, and sleeping after 50 ms makes it 3x slower.
// Works complete in issue order because one worker runs one collective at a time (comm/work_queue.h).
// MPI_Finalize runs from an atexit handler registered by the first Create (only when this library
// initialised MPI; a program that called MPI_Init itself finalises itself).
//
// Note [Stuck MPI operations]
// MPI cannot cancel a collective (MPI_Cancel is for point-to-point receives only). When a wait passes
// its deadline, the Work fails with kDeadlineExceeded naming the collective and rank, the group is
// broken (later works fail at once) and the operation stays pending: its tensors and staging buffers
// are kept alive for the rest of the process (MPI may still write into them), the group's communicator
// is never freed, and the exit handler calls MPI_Abort instead of MPI_Finalize (which would wait for the
// operation), ending every rank of the job with exit code 1. A rank that dies is OpenMPI's business:
// without fault tolerance, mpirun then ends the whole job.

namespace ddp {
namespace {

// Serialises every MPI call in the process (MPI_THREAD_SERIALIZED).
absl::Mutex& MpiCallMutex() {
  static absl::Mutex* mu = new absl::Mutex();
  return *mu;
}

// Whether some operation timed out and is still pending (Note [Stuck MPI operations]).
std::atomic<bool> g_operation_stuck{false};

// Buffers of stuck operations, never freed.
void KeepAliveForever(std::vector<Tensor> buffers) {
  static absl::Mutex* mu = new absl::Mutex();
  static auto* kept = new std::vector<std::vector<Tensor>>();
  absl::MutexLock lock(mu);
  kept->push_back(std::move(buffers));
}

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return absl::StrCat("MPI error ", code);
  return std::string(text, length);
}

void FinalizeMpiAtExit() {
  absl::MutexLock lock(&MpiCallMutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_operation_stuck.load()) {
    std::fprintf(stderr, "ProcessGroupMpi: an MPI collective timed out and is still pending; calling MPI_Abort "
                         "instead of MPI_Finalize (this ends every rank of the job)\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

// float16 and bfloat16 reductions as MPI user operations over 16-bit words: inout[i] = op(inout[i], in[i]).
template <DType kType, ReduceOp kOp>
void HalfReduce(void* in, void* inout, int* length, MPI_Datatype* /*type*/) {
  GetReduceFunction(kType, kOp)(inout, inout, in, static_cast<size_t>(*length));
}

struct HalfOps {
  MPI_Op ops[2][4];  // [float16, bfloat16][sum, min, max, product]
};

template <DType kType>
absl::Status CreateHalfOps(MPI_Op* ops) {
  MPI_User_function* functions[4] = {&HalfReduce<kType, ReduceOp::kSum>, &HalfReduce<kType, ReduceOp::kMin>,
                                     &HalfReduce<kType, ReduceOp::kMax>, &HalfReduce<kType, ReduceOp::kProduct>};
  for (int i = 0; i < 4; ++i) {
    const int rc = MPI_Op_create(functions[i], /*commute=*/1, &ops[i]);
    if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat("MPI_Op_create: ", MpiErrorText(rc)));
  }
  return absl::OkStatus();
}

HalfOps* g_half_ops = nullptr;  // set once by EnsureMpiInitialized, under MpiCallMutex()

// MPI_Init_thread(MPI_THREAD_SERIALIZED) once per process, the exit handler and the half-precision ops.
absl::Status EnsureMpiInitialized() {
  absl::MutexLock lock(&MpiCallMutex());
  if (g_half_ops != nullptr) return absl::OkStatus();
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Note [Non-blocking all-reduce algorithm]: OpenMPI's default choice for MPI_Iallreduce (libnbc) runs
    // 2-4x slower than the blocking MPI_Allreduce at 1-64 MiB on 2 ranks; Rabenseifner's algorithm (3)
    // matches it up to 16 MiB (BENCHMARKS.md, "Gloo and MPI backends"). A value the user set is kept.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      return absl::FailedPreconditionError(absl::StrCat("mpi: MPI_Init_thread failed: ", MpiErrorText(rc)));
    }
    std::atexit(FinalizeMpiAtExit);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mpi: the MPI library provides thread level ", provided,
        "; the mpi backend needs MPI_THREAD_SERIALIZED (its worker thread issues the MPI calls)"));
  }
  auto ops = std::make_unique<HalfOps>();
  DDP_RETURN_IF_ERROR(CreateHalfOps<DType::kFloat16>(ops->ops[0]));
  DDP_RETURN_IF_ERROR(CreateHalfOps<DType::kBFloat16>(ops->ops[1]));
  g_half_ops = ops.release();
  return absl::OkStatus();
}

MPI_Datatype MpiType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kFloat16:
    case DType::kBFloat16:
      return MPI_UINT16_T;
  }
  DDP_CHECK(false) << "mpi: unknown dtype";
  return MPI_DATATYPE_NULL;
}

// The MPI operation for `op` on `dtype`; kAvg sums (the caller divides afterwards).
MPI_Op MpiOp(DType dtype, ReduceOp op) {
  const int index = op == ReduceOp::kMin ? 1 : op == ReduceOp::kMax ? 2 : op == ReduceOp::kProduct ? 3 : 0;
  if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) {
    return g_half_ops->ops[dtype == DType::kFloat16 ? 0 : 1][index];
  }
  const MPI_Op builtin[4] = {MPI_SUM, MPI_MIN, MPI_MAX, MPI_PROD};
  return builtin[index];
}

// Runs `start` (which issues one non-blocking MPI call into *request) and polls the request until it
// completes, fails, or `deadline` passes (Note [MPI worker thread]). `what()` prefixes every error.
template <typename Start>
absl::Status RunNonBlocking(absl::FunctionRef<std::string()> what, absl::Time deadline,
                            const ProcessGroupMpiOptions& options, Start start) {
  MPI_Request request = MPI_REQUEST_NULL;
  int rc;
  {
    absl::MutexLock lock(&MpiCallMutex());
    rc = start(&request);
  }
  if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat(what(), ": ", MpiErrorText(rc)));
  const absl::Time begin = absl::Now();
  for (;;) {
    int done = 0;
    {
      absl::MutexLock lock(&MpiCallMutex());
      rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) return absl::InternalError(absl::StrCat(what(), ": ", MpiErrorText(rc)));
    if (done) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now > deadline) {
      g_operation_stuck.store(true);
      return absl::DeadlineExceededError(absl::StrCat(
          what(), ": not complete after ", absl::FormatDuration(now - begin),
          " (the group's timeout; some rank did not join it). MPI cannot cancel it: the group is broken and "
          "the process will end with MPI_Abort at exit"));
    }
    if (now - begin > options.yield_before_sleep) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else if (now - begin > options.spin_before_yield) {
      std::this_thread::yield();
    }
  }
}

// RunNonBlocking for the running collective `call`; when it times out, `buffers` (which MPI may still
// write) are kept alive for ever (Note [Stuck MPI operations]).
template <typename Start>
absl::Status RunCollective(const RunningCall& call, const ProcessGroupMpiOptions& options,
                           std::vector<Tensor> buffers, Start start) {
  absl::Status status = RunNonBlocking(call, call.deadline, options, start);
  if (absl::IsDeadlineExceeded(status)) KeepAliveForever(std::move(buffers));
  return status;
}

// MPI counts are ints.
absl::Status CheckCount(const RunningCall& call, int64_t count) {
  if (count <= INT_MAX) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(call(), ": ", count, " elements per rank exceed MPI's int count (", INT_MAX, ")"));
}

// What the queued skeleton needs of the group's options.
QueuedProcessGroupOptions QueuedGroupOptionsOf(const ProcessGroupMpiOptions& options) {
  QueuedProcessGroupOptions queued;
  queued.backend = "mpi";
  queued.timeout = options.timeout;
  return queued;
}

}  // namespace

struct ProcessGroupMpi::Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  bool stuck = false;  // an operation on `comm` timed out (worker thread; read after it joined)
};

absl::StatusOr<std::unique_ptr<ProcessGroupMpi>> ProcessGroupMpi::Create(const ProcessGroupMpiOptions& options) {
  DDP_RETURN_IF_ERROR(EnsureMpiInitialized());
  auto comm = std::make_unique<Comm>();
  int world_rank = 0, world_size = 0;
  {
    absl::MutexLock lock(&MpiCallMutex());
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  }
  DDP_RETURN_IF_ERROR(CheckMpiMatchesLaunch(world_rank, world_size, options.launch));
  const std::string what = absl::StrCat("mpi: rank ", world_rank, " of ", world_size,
                                        " joining (MPI_Comm_idup of MPI_COMM_WORLD)");
  absl::Status joined = RunNonBlocking([&] { return what; }, absl::Now() + options.timeout, options,
                                       [&](MPI_Request* request) {
                                         return MPI_Comm_idup(MPI_COMM_WORLD, &comm->comm, request);
                                       });
  if (!joined.ok()) {
    comm.release();  // the duplicate may still be created later (Note [Stuck MPI operations])
    return joined;
  }
  int rank = 0, size = 0, local_rank = 0, local_size = 1;
  {
    absl::MutexLock lock(&MpiCallMutex());
    MPI_Comm_set_errhandler(comm->comm, MPI_ERRORS_RETURN);  // errors become Statuses, not aborts
    MPI_Comm_rank(comm->comm, &rank);
    MPI_Comm_size(comm->comm, &size);
    // Every rank just joined, so this blocking split cannot wait on an absent rank.
    MPI_Comm local = MPI_COMM_NULL;
    if (MPI_Comm_split_type(comm->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
      MPI_Comm_rank(local, &local_rank);
      MPI_Comm_size(local, &local_size);
      MPI_Comm_free(&local);
    }
  }
  return std::unique_ptr<ProcessGroupMpi>(
      new ProcessGroupMpi(std::move(comm), rank, size, local_rank, local_size, options));
}

ProcessGroupMpi::ProcessGroupMpi(std::unique_ptr<Comm> comm, int rank, int size, int local_rank, int local_size,
                                 ProcessGroupMpiOptions options)
    : QueuedProcessGroup(rank, size, QueuedGroupOptionsOf(options)),
      comm_(std::move(comm)),
      local_rank_(local_rank),
      local_size_(local_size),
      options_(std::move(options)) {}

ProcessGroupMpi::~ProcessGroupMpi() {
  StopQueue();  // comm_->stuck is read after the worker joined
  if (comm_->stuck) {
    comm_.release();  // Note [Stuck MPI operations]
    return;
  }
  absl::MutexLock lock(&MpiCallMutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_->comm);
}

void ProcessGroupMpi::OnFailure(const absl::Status& failure) {
  if (absl::IsDeadlineExceeded(failure)) comm_->stuck = true;
}

absl::Status ProcessGroupMpi::RunAllReduce(const Tensor& tensor, ReduceOp op, const RunningCall& call) {
  const int64_t count = tensor.numel();
  if (size() == 1 || count == 0) return absl::OkStatus();
  DDP_RETURN_IF_ERROR(CheckCount(call, count));
  DDP_RETURN_IF_ERROR(RunCollective(call, options_, {tensor}, [&](MPI_Request* r) {
    return MPI_Iallreduce(MPI_IN_PLACE, tensor.raw_data(), static_cast<int>(count), MpiType(tensor.dtype()),
                          MpiOp(tensor.dtype(), op), comm_->comm, r);
  }));
  if (op == ReduceOp::kAvg) DivideInPlace(tensor.raw_data(), tensor.dtype(), count, size());
  return absl::OkStatus();
}

absl::Status ProcessGroupMpi::RunBroadcast(const Tensor& tensor, int root, const RunningCall& call) {
  const int64_t count = tensor.numel();
  if (size() == 1 || count == 0) return absl::OkStatus();
  DDP_RETURN_IF_ERROR(CheckCount(call, count));
  return RunCollective(call, options_, {tensor}, [&](MPI_Request* r) {
    return MPI_Ibcast(tensor.raw_data(), static_cast<int>(count), MpiType(tensor.dtype()), root, comm_->comm, r);
  });
}

absl::Status ProcessGroupMpi::RunAllGather(const std::vector<Tensor>& outputs, const Tensor& input,
                                           const RunningCall& call) {
  const int64_t count = input.numel();
  const size_t bytes = input.nbytes();
  if (count == 0) return absl::OkStatus();
  if (size() == 1) {
    std::memcpy(outputs[0].raw_data(), input.raw_data(), bytes);
    return absl::OkStatus();
  }
  DDP_RETURN_IF_ERROR(CheckCount(call, count * size()));
  // The outputs are separate tensors: MPI gathers into one buffer, copied out afterwards.
  Tensor gathered = Tensor::Empty({count * size()}, input.dtype());
  DDP_RETURN_IF_ERROR(RunCollective(call, options_, {input, gathered}, [&](MPI_Request* r) {
    return MPI_Iallgather(input.raw_data(), static_cast<int>(count), MpiType(input.dtype()), gathered.raw_data(),
                          static_cast<int>(count), MpiType(input.dtype()), comm_->comm, r);
  }));
  for (int q = 0; q < size(); ++q) {
    std::memcpy(outputs[q].raw_data(), static_cast<const char*>(gathered.raw_data()) + q * bytes, bytes);
  }
  return absl::OkStatus();
}

absl::Status ProcessGroupMpi::RunReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                               const RunningCall& call) {
  const int64_t count = output.numel();
  const size_t bytes = output.nbytes();
  if (count == 0) return absl::OkStatus();
  if (size() == 1) {
    std::memcpy(output.raw_data(), inputs[0].raw_data(), bytes);
    return absl::OkStatus();
  }
  DDP_RETURN_IF_ERROR(CheckCount(call, count * size()));
  Tensor staged = Tensor::Empty({count * size()}, output.dtype());
  for (int q = 0; q < size(); ++q) {
    std::memcpy(static_cast<char*>(staged.raw_data()) + q * bytes, inputs[q].raw_data(), bytes);
  }
  DDP_RETURN_IF_ERROR(RunCollective(call, options_, {output, staged}, [&](MPI_Request* r) {
    return MPI_Ireduce_scatter_block(staged.raw_data(), output.raw_data(), static_cast<int>(count),
                                     MpiType(output.dtype()), MpiOp(output.dtype(), op), comm_->comm, r);
  }));
  if (op == ReduceOp::kAvg) DivideInPlace(output.raw_data(), output.dtype(), count, size());
  return absl::OkStatus();
}

absl::Status ProcessGroupMpi::RunReduce(const Tensor& tensor, int root, ReduceOp op, const RunningCall& call) {
  const int64_t count = tensor.numel();
  if (size() == 1 || count == 0) return absl::OkStatus();
  DDP_RETURN_IF_ERROR(CheckCount(call, count));
  const bool is_root = rank() == root;
  DDP_RETURN_IF_ERROR(RunCollective(call, options_, {tensor}, [&](MPI_Request* r) {
    return MPI_Ireduce(is_root ? MPI_IN_PLACE : tensor.raw_data(), is_root ? tensor.raw_data() : nullptr,
                       static_cast<int>(count), MpiType(tensor.dtype()), MpiOp(tensor.dtype(), op), root,
                       comm_->comm, r);
  }));
  if (op == ReduceOp::kAvg && is_root) DivideInPlace(tensor.raw_data(), tensor.dtype(), count, size());
  return absl::OkStatus();
}

absl::Status ProcessGroupMpi::RunBarrier(const RunningCall& call) {
  if (size() == 1) return absl::OkStatus();
  return RunCollective(call, options_, {}, [&](MPI_Request* r) { return MPI_Ibarrier(comm_->comm, r); });
}

std::shared_ptr<Work> ProcessGroupMpi::IssueAllReduce(const CollectiveSpec& spec, const Tensor& tensor, ReduceOp op) {
  return Issue(spec, [this, tensor, op](const RunningCall& call) { return RunAllReduce(tensor, op, call); });
}

std::shared_ptr<Work> ProcessGroupMpi::IssueBroadcast(const CollectiveSpec& spec, const Tensor& tensor, int root) {
  return Issue(spec, [this, tensor, root](const RunningCall& call) { return RunBroadcast(tensor, root, call); });
}

std::shared_ptr<Work> ProcessGroupMpi::IssueAllGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                                      const Tensor& input) {
  return Issue(spec,
               [this, outputs, input](const RunningCall& call) { return RunAllGather(outputs, input, call); });
}

std::shared_ptr<Work> ProcessGroupMpi::IssueReduceScatter(const CollectiveSpec& spec, const Tensor& output,
                                                          const std::vector<Tensor>& inputs, ReduceOp op) {
  return Issue(spec, [this, output, inputs, op](const RunningCall& call) {
    return RunReduceScatter(output, inputs, op, call);
  });
}

std::shared_ptr<Work> ProcessGroupMpi::IssueReduce(const CollectiveSpec& spec, const Tensor& tensor, int root,
                                                   ReduceOp op) {
  return Issue(spec,
               [this, tensor, root, op](const RunningCall& call) { return RunReduce(tensor, root, op, call); });
}

std::shared_ptr<Work> ProcessGroupMpi::IssueBarrier(const CollectiveSpec& spec) {
  return Issue(spec, [this](const RunningCall& call) { return RunBarrier(call); });
}

}  // namespace ddp
