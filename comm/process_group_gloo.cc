#include "comm/process_group_gloo.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "comm/async_work.h"
#include "comm/gloo_store_adapter.h"
#include "comm/reduce_functions.h"
#include "comm/socket_util.h"
#include "tensor/ops.h"

namespace ddp {

// Runs queued collectives one at a time, in issue order, on its own thread.
class ProcessGroupGloo::Worker {
 public:
  using Task = std::function<void()>;

  Worker() : thread_([this] { Loop(); }) {}
  ~Worker() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  void Enqueue(std::shared_ptr<AsyncWork> work, Task task) {
    absl::MutexLock lock(&mu_);
    queue_.emplace_back(std::move(work), std::move(task));
  }

 private:
  void Loop() {
    while (true) {
      std::pair<std::shared_ptr<AsyncWork>, Task> item;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Worker* w)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) { return w->stopping_ || !w->queue_.empty(); },
            this));
        if (queue_.empty()) return;  // stopping with nothing left
        item = std::move(queue_.front());
        queue_.pop_front();
        if (stopping_) {
          item.first->Complete(absl::CancelledError(
              absl::StrCat(item.first->description(), ": process group destroyed before it ran")));
          continue;
        }
      }
      item.first->MarkStarted();
      item.second();
    }
  }

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::pair<std::shared_ptr<AsyncWork>, Task>> queue_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

namespace {

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// Sets Gloo's typed input/output pointer for `dtype` (16-bit floats travel as uint16_t).
template <typename Options>
void SetOutput(Options& options, void* data, DType dtype, size_t count) {
  switch (dtype) {
    case DType::kFloat32:
      options.template setOutput<float>(static_cast<float*>(data), count);
      break;
    case DType::kInt64:
      options.template setOutput<int64_t>(static_cast<int64_t*>(data), count);
      break;
    default:
      options.template setOutput<uint16_t>(static_cast<uint16_t*>(data), count);
      break;
  }
}
template <typename Options>
void SetInput(Options& options, void* data, DType dtype, size_t count) {
  switch (dtype) {
    case DType::kFloat32:
      options.template setInput<float>(static_cast<float*>(data), count);
      break;
    case DType::kInt64:
      options.template setInput<int64_t>(static_cast<int64_t*>(data), count);
      break;
    default:
      options.template setInput<uint16_t>(static_cast<uint16_t*>(data), count);
      break;
  }
}

void CheckTensor(const char* op, const Tensor& t) {
  DDP_CHECK(t.device().is_cpu()) << op << " (gloo): tensor on " << t.device().ToString()
                                 << "; the gloo backend takes CPU tensors";
  DDP_CHECK(t.is_contiguous()) << op << " (gloo): tensor must be contiguous";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> ProcessGroupGloo::Create(
    Store& store, int rank, int size, const ProcessGroupGlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: rank ", rank, " is outside a group of ", size));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(ToChrono(options.timeout));
    GlooStoreAdapter adapter(&store, options.timeout);
    context->connectFullMesh(adapter, device);
    return std::unique_ptr<ProcessGroupGloo>(new ProcessGroupGloo(std::move(context), &store, rank, size, options));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("gloo: rank ", rank, " of ", size, " could not connect to its peers (", options.hostname,
                     ", timeout ", absl::FormatDuration(options.timeout), "): ", e.what()));
  }
}

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<gloo::Context> context, Store* store, int rank, int size,
                                   ProcessGroupGlooOptions options)
    : context_(std::move(context)),
      rank_(rank),
      size_(size),
      options_(std::move(options)),
      failure_reports_(store, "gloo/failure_report/", rank, size, options_.failure_report_window),
      worker_(std::make_unique<Worker>()) {}

ProcessGroupGloo::~ProcessGroupGloo() { worker_.reset(); }

std::shared_ptr<Work> ProcessGroupGloo::Issue(const std::function<std::string(uint32_t)>& describe,
                                              std::function<void(uint32_t)> body) {
  absl::MutexLock lock(&issue_mu_);  // tags and queue order agree across issuing threads
  const uint32_t tag = next_tag_++;
  auto work = std::make_shared<AsyncWork>(describe(tag));
  AsyncWork* raw = work.get();
  worker_->Enqueue(work, [this, raw, tag, body = std::move(body)] {
    absl::Status status = absl::OkStatus();
    try {
      body(tag);
    } catch (const std::exception& e) {
      const std::string failure = absl::StrCat(raw->description(), " failed: ", e.what());
      // The group is broken: closing every connection makes the peers still waiting on this rank fail
      // now rather than at their timeout, so they report too (Note [Failure reports]).
      context_->closeConnections();
      status = absl::UnavailableError(absl::StrCat(failure, " ", failure_reports_.Report(failure)));
    }
    raw->Complete(status);
  });
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::AllReduce(const Tensor& tensor, ReduceOp op) {
  CheckTensor("AllReduce", tensor);
  return Issue(
      [&](uint32_t tag) {
        return absl::StrCat("AllReduce(", ReduceOpName(op), ") #", tag, " of ", tensor.numel(), " ",
                            DTypeName(tensor.dtype()), " on rank ", rank_, "/", size_, " (gloo)");
      },
      [this, tensor, op](uint32_t tag) {
        if (tensor.numel() == 0 || size_ == 1) {
          if (op == ReduceOp::kAvg && size_ > 1)
            DivideInPlace(tensor.raw_data(), tensor.dtype(), tensor.numel(), size_);
          return;
        }
        gloo::AllreduceOptions options(context_);
        SetOutput(options, tensor.raw_data(), tensor.dtype(), tensor.numel());
        RawReduceFunction fn = GetReduceFunction(tensor.dtype(), op);
        options.setReduceFunction(fn);
        options.setTag(tag);
        options.setTimeout(ToChrono(options_.timeout));
        gloo::allreduce(options);
        if (op == ReduceOp::kAvg) DivideInPlace(tensor.raw_data(), tensor.dtype(), tensor.numel(), size_);
      });
}

std::shared_ptr<Work> ProcessGroupGloo::Broadcast(const Tensor& tensor, int root) {
  CheckTensor("Broadcast", tensor);
  DDP_CHECK(root >= 0 && root < size_) << "Broadcast: root " << root << " outside a group of " << size_;
  return Issue(
      [&](uint32_t tag) {
        return absl::StrCat("Broadcast(root ", root, ") #", tag, " of ", tensor.numel(), " ",
                            DTypeName(tensor.dtype()), " on rank ", rank_, "/", size_, " (gloo)");
      },
      [this, tensor, root](uint32_t tag) {
        if (tensor.numel() == 0 || size_ == 1) return;
        gloo::BroadcastOptions options(context_);
        SetOutput(options, tensor.raw_data(), tensor.dtype(), tensor.numel());
        options.setRoot(root);
        options.setTag(tag);
        options.setTimeout(ToChrono(options_.timeout));
        gloo::broadcast(options);
      });
}

std::shared_ptr<Work> ProcessGroupGloo::AllGather(const std::vector<Tensor>& outputs, const Tensor& input) {
  CheckTensor("AllGather", input);
  DDP_CHECK(static_cast<int>(outputs.size()) == size_)
      << "AllGather: " << outputs.size() << " outputs for a group of " << size_;
  for (const Tensor& out : outputs) {
    CheckTensor("AllGather", out);
    DDP_CHECK(out.numel() == input.numel() && out.dtype() == input.dtype())
        << "AllGather: output " << ShapeToString(out.shape()) << " does not match input "
        << ShapeToString(input.shape());
  }
  return Issue(
      [&](uint32_t tag) {
        return absl::StrCat("AllGather #", tag, " of ", input.numel(), " ", DTypeName(input.dtype()),
                            " on rank ", rank_, "/", size_, " (gloo)");
      },
      [this, outputs, input](uint32_t tag) {
        const size_t bytes = input.nbytes();
        if (input.numel() == 0) return;
        Tensor flat = Tensor::Empty({static_cast<int64_t>(size_) * input.numel()}, input.dtype());
        if (size_ == 1) {
          std::memcpy(flat.raw_data(), input.raw_data(), bytes);
        } else {
          gloo::AllgatherOptions options(context_);
          SetInput(options, input.raw_data(), input.dtype(), input.numel());
          SetOutput(options, flat.raw_data(), input.dtype(), flat.numel());
          options.setTag(tag);
          options.setTimeout(ToChrono(options_.timeout));
          gloo::allgather(options);
        }
        for (int r = 0; r < size_; ++r) {
          std::memcpy(outputs[r].raw_data(), static_cast<char*>(flat.raw_data()) + r * bytes, bytes);
        }
      });
}

std::shared_ptr<Work> ProcessGroupGloo::ReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                      ReduceOp op) {
  CheckTensor("ReduceScatter", output);
  DDP_CHECK(static_cast<int>(inputs.size()) == size_)
      << "ReduceScatter: " << inputs.size() << " inputs for a group of " << size_;
  for (const Tensor& in : inputs) {
    CheckTensor("ReduceScatter", in);
    DDP_CHECK(in.numel() == output.numel() && in.dtype() == output.dtype())
        << "ReduceScatter: input " << ShapeToString(in.shape()) << " does not match output "
        << ShapeToString(output.shape());
  }
  return Issue(
      [&](uint32_t tag) {
        return absl::StrCat("ReduceScatter(", ReduceOpName(op), ") #", tag, " of ", output.numel(), " ",
                            DTypeName(output.dtype()), " on rank ", rank_, "/", size_, " (gloo)");
      },
      [this, output, inputs, op](uint32_t tag) {
        const size_t bytes = output.nbytes();
        if (output.numel() == 0) return;
        Tensor flat = Tensor::Empty({static_cast<int64_t>(size_) * output.numel()}, output.dtype());
        for (int r = 0; r < size_; ++r) {
          std::memcpy(static_cast<char*>(flat.raw_data()) + r * bytes, inputs[r].raw_data(), bytes);
        }
        if (size_ > 1) {
          gloo::AllreduceOptions options(context_);
          SetOutput(options, flat.raw_data(), flat.dtype(), flat.numel());
          options.setReduceFunction(GetReduceFunction(flat.dtype(), op));
          options.setTag(tag);
          options.setTimeout(ToChrono(options_.timeout));
          gloo::allreduce(options);
        }
        std::memcpy(output.raw_data(), static_cast<char*>(flat.raw_data()) + rank_ * bytes, bytes);
        if (op == ReduceOp::kAvg && size_ > 1)
          DivideInPlace(output.raw_data(), output.dtype(), output.numel(), size_);
      });
}

std::shared_ptr<Work> ProcessGroupGloo::Reduce(const Tensor& tensor, int root, ReduceOp op) {
  CheckTensor("Reduce", tensor);
  DDP_CHECK(root >= 0 && root < size_) << "Reduce: root " << root << " outside a group of " << size_;
  return Issue(
      [&](uint32_t tag) {
        return absl::StrCat("Reduce(", ReduceOpName(op), ", root ", root, ") #", tag, " of ", tensor.numel(),
                            " ", DTypeName(tensor.dtype()), " on rank ", rank_, "/", size_, " (gloo)");
      },
      [this, tensor, root, op](uint32_t tag) {
        if (tensor.numel() == 0 || size_ == 1) return;
        gloo::ReduceOptions options(context_);
        SetOutput(options, tensor.raw_data(), tensor.dtype(), tensor.numel());
        options.setRoot(root);
        options.setReduceFunction(GetReduceFunction(tensor.dtype(), op));
        options.setTag(tag);
        options.setTimeout(ToChrono(options_.timeout));
        gloo::reduce(options);
        if (op == ReduceOp::kAvg && rank_ == root)
          DivideInPlace(tensor.raw_data(), tensor.dtype(), tensor.numel(), size_);
      });
}

std::shared_ptr<Work> ProcessGroupGloo::Barrier() {
  return Issue(
      [&](uint32_t tag) { return absl::StrCat("Barrier #", tag, " on rank ", rank_, "/", size_, " (gloo)"); },
      [this](uint32_t tag) {
        if (size_ == 1) return;
        gloo::BarrierOptions options(context_);
        options.setTag(tag);
        options.setTimeout(ToChrono(options_.timeout));
        gloo::barrier(options);
      });
}

}  // namespace ddp
