// How a bench/allreduce rank joins its all-reduce implementations, and how each one is called.
#include "bench/allreduce_impls.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/shm_floor.h"
#include "store/file_store.h"
#include "comm/gloo/gloo_store_adapter.h"
#include "store/prefix_store.h"
#include "comm/process_group_debug.h"
#include "comm/gloo/process_group_gloo.h"
#include "comm/shm/process_group_shm.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

bool Contains(const std::vector<AllReduceImpl>& impls, AllReduceImpl impl) {
  for (AllReduceImpl i : impls) {
    if (i == impl) return true;
  }
  return false;
}

// The raw Gloo context over loopback TCP (the same device options as ProcessGroupGloo's). Gloo reports
// a failed rendezvous by throwing; that becomes a Status here.
absl::StatusOr<std::shared_ptr<gloo::Context>> ConnectRaw(Store& store, int rank, int world,
                                                          absl::Duration timeout) {
  try {
    GlooStoreAdapter adapter(&store, timeout);
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
    context->setTimeout(ToChrono(timeout));
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    context->connectFullMesh(adapter, device);
    return std::shared_ptr<gloo::Context>(std::move(context));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("raw Gloo context of rank ", rank, ": ", e.what()));
  }
}

}  // namespace

const char* AllReduceImplName(AllReduceImpl impl) {
  switch (impl) {
    case AllReduceImpl::kOurs:
      return "ours";
    case AllReduceImpl::kRaw:
      return "raw";
    case AllReduceImpl::kShm:
      return "shm";
    case AllReduceImpl::kShmBuf:
      return "shm_buf";
    case AllReduceImpl::kFloor:
      return "floor";
  }
  return "?";
}

absl::StatusOr<std::vector<AllReduceImpl>> ParseAllReduceImpls(absl::string_view text) {
  std::vector<AllReduceImpl> impls;
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    bool known = false;
    for (AllReduceImpl impl : {AllReduceImpl::kOurs, AllReduceImpl::kRaw, AllReduceImpl::kShm,
                               AllReduceImpl::kShmBuf, AllReduceImpl::kFloor}) {
      if (name != AllReduceImplName(impl)) continue;
      if (Contains(impls, impl))
        return absl::InvalidArgumentError(absl::StrCat("--impls names '", name, "' twice"));
      impls.push_back(impl);
      known = true;
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("--impls: unknown implementation '", name, "' (known: ours, raw, shm, shm_buf, floor)"));
    }
  }
  if (impls.empty()) return absl::InvalidArgumentError("--impls names no implementation");
  return impls;
}

BenchRank::BenchRank(int rank, int world, absl::Duration timeout)
    : rank_(rank), world_(world), timeout_(timeout) {}

BenchRank::~BenchRank() = default;

absl::StatusOr<std::unique_ptr<BenchRank>> BenchRank::Join(const std::string& store_path, int rank, int world,
                                                           const BenchRankOptions& options) {
  std::unique_ptr<BenchRank> self(new BenchRank(rank, world, options.timeout));
  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Create(store_path);
  if (!store.ok()) return store.status();
  self->store_ = *std::move(store);
  if (Contains(options.impls, AllReduceImpl::kOurs)) {
    self->gloo_group_store_ = std::make_unique<PrefixStore>("pg/", self->store_.get());
    ProcessGroupGlooOptions gloo_options;
    gloo_options.timeout = options.timeout;
    gloo_options.hostname = "127.0.0.1";
    absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> group =
        ProcessGroupGloo::Create(*self->gloo_group_store_, rank, world, gloo_options);
    if (!group.ok()) {
      return absl::Status(group.status().code(), absl::StrCat("ours: ", group.status().message()));
    }
    self->gloo_group_ = *std::move(group);
    if (options.debug_detail) self->debug_ = std::make_unique<ProcessGroupDebug>(self->gloo_group_.get());
  }
  if (Contains(options.impls, AllReduceImpl::kShm) || Contains(options.impls, AllReduceImpl::kShmBuf)) {
    PrefixStore shm_store("shmpg/", self->store_.get());  // ProcessGroupShm keeps no store
    ProcessGroupShmOptions shm_options;
    shm_options.timeout = options.timeout;
    absl::StatusOr<std::unique_ptr<ProcessGroupShm>> group =
        ProcessGroupShm::Create(shm_store, rank, world, shm_options);
    if (!group.ok()) {
      return absl::Status(group.status().code(), absl::StrCat("shm: ", group.status().message()));
    }
    self->shm_group_ = *std::move(group);
  }
  if (Contains(options.impls, AllReduceImpl::kFloor)) {
    absl::StatusOr<std::unique_ptr<ShmFloor>> floor =
        ShmFloor::Create(*self->store_, rank, world, options.floor_bytes, options.timeout);
    if (!floor.ok()) return floor.status();
    self->floor_ = *std::move(floor);
  }
  PrefixStore raw_store("raw/", self->store_.get());
  absl::StatusOr<std::shared_ptr<gloo::Context>> raw = ConnectRaw(raw_store, rank, world, options.timeout);
  if (!raw.ok()) return raw.status();
  self->raw_ = *std::move(raw);
  return self;
}

void BenchRank::Fail(const absl::Status& status) const {
  std::fprintf(stderr, "allreduce_bench rank %d: %s\n", rank_, std::string(status.message()).c_str());
  std::fflush(stdout);
  std::_Exit(3);
}

void BenchRank::AllReduce(AllReduceImpl impl, const Tensor& t) {
  switch (impl) {
    case AllReduceImpl::kRaw:
      RawAllReduce(t.data<float>(), static_cast<size_t>(t.numel()));
      return;
    case AllReduceImpl::kFloor: {
      if (floor_ == nullptr || t.raw_data() != floor_->buffer()) {
        Fail(absl::FailedPreconditionError("floor all-reduces only its own buffer (NewTensor(kFloor))"));
      }
      absl::Status status = floor_->AllReduce(static_cast<size_t>(t.numel()));
      if (!status.ok()) Fail(status);
      return;
    }
    case AllReduceImpl::kOurs:
    case AllReduceImpl::kShm:
    case AllReduceImpl::kShmBuf: {
      ProcessGroup* group = impl != AllReduceImpl::kOurs ? static_cast<ProcessGroup*>(shm_group_.get())
                            : debug_ != nullptr         ? static_cast<ProcessGroup*>(debug_.get())
                                                        : static_cast<ProcessGroup*>(gloo_group_.get());
      if (group == nullptr) {
        Fail(absl::FailedPreconditionError(absl::StrCat(AllReduceImplName(impl), " was not joined")));
      }
      absl::Status status = group->AllReduce(t)->Wait(timeout_);
      if (!status.ok()) Fail(status);
      return;
    }
  }
}

Tensor BenchRank::NewTensor(AllReduceImpl impl, int64_t count) const {
  if (impl == AllReduceImpl::kFloor) {
    if (floor_ == nullptr) Fail(absl::FailedPreconditionError("floor was not joined"));
    if (static_cast<size_t>(count) * sizeof(float) > floor_->capacity_bytes()) {
      Fail(absl::InvalidArgumentError(absl::StrCat("floor: ", count, " floats exceed its buffer")));
    }
    // A view of the floor's buffer, which outlives every tensor of this rank (no release function).
    Storage storage = std::make_shared<StorageImpl>(floor_->buffer(), floor_->capacity_bytes(), Device::CPU(),
                                                    [](void*) {});
    Tensor t = Tensor::View(std::move(storage), {count}, {1}, 0, DType::kFloat32);
    FillInPlace(t, 0.0f);
    return t;
  }
  if (impl != AllReduceImpl::kShmBuf) return Zeros({count});
  if (shm_group_ == nullptr) Fail(absl::FailedPreconditionError("shm_buf was not joined"));
  Tensor t = shm_group_->NewCommBuffer(count, DType::kFloat32, Device::CPU());
  FillInPlace(t, 0.0f);
  return t;
}

void BenchRank::OursReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs) {
  if (gloo_group_ == nullptr) Fail(absl::FailedPreconditionError("reduce-scatter needs \"ours\" (--impls)"));
  absl::Status status = gloo_group_->ReduceScatter(output, inputs)->Wait(timeout_);
  if (!status.ok()) Fail(status);
}

void BenchRank::RawAllReduce(float* data, size_t count) {
  if (count == 0) return;
  try {
    gloo::AllreduceOptions options(raw_);
    options.setOutput<float>(data, count);
    options.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
    options.setTag(++raw_tag_);  // Fresh tags, as ProcessGroupGloo uses.
    options.setTimeout(ToChrono(timeout_));
    gloo::allreduce(options);
  } catch (const std::exception& e) {
    Fail(absl::UnavailableError(absl::StrCat("raw gloo::allreduce of ", count, " floats: ", e.what())));
  }
}

void BenchRank::Barrier() {
  try {
    gloo::BarrierOptions options(raw_);
    options.setTimeout(ToChrono(timeout_));
    gloo::barrier(options);
  } catch (const std::exception& e) {
    Fail(absl::UnavailableError(absl::StrCat("control barrier: ", e.what())));
  }
}

int64_t BenchRank::BroadcastFromZero(int64_t value) {
  try {
    gloo::BroadcastOptions options(raw_);
    options.setOutput<int64_t>(&value, 1);
    options.setRoot(0);
    options.setTimeout(ToChrono(timeout_));
    gloo::broadcast(options);
  } catch (const std::exception& e) {
    Fail(absl::UnavailableError(absl::StrCat("control broadcast: ", e.what())));
  }
  return value;
}

double BenchRank::MaxOverRanks(double value) {
  try {
    gloo::AllreduceOptions options(raw_);
    options.setOutput<double>(&value, 1);
    options.setReduceFunction(static_cast<ReduceFn>(&gloo::max<double>));
    options.setTimeout(ToChrono(timeout_));
    gloo::allreduce(options);
  } catch (const std::exception& e) {
    Fail(absl::UnavailableError(absl::StrCat("control maximum: ", e.what())));
  }
  return value;
}

}  // namespace ddp
