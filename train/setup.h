// The pieces train/train builds before its loop, from a TrainConfig: the model, DDP's options and the
// wrapped model, the optimizer. bench/train_throughput builds the same pieces with them, so that the
// benchmark times what train/train runs.
#ifndef DDP_TRAIN_SETUP_H_
#define DDP_TRAIN_SETUP_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "ddp/distributed_data_parallel.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "tensor/tensor.h"
#include "train/train_config.h"

namespace ddp {

// The model of config.model, initialised from config.seed (or loaded from config.init_from), with its
// parameters and buffers on `device`. Errors: an unknown model, an unreadable or mismatched init file.
absl::StatusOr<std::shared_ptr<Module>> BuildModel(const TrainConfig& config, Device device);

// config.optimizer (sgd, adam or adamw) over `params` with config's lr, momentum and weight decay.
absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const TrainConfig& config, const std::vector<Tensor>& params);

// DDP's options as config's flags set them: bucket caps (with --bucket_cap_mb=auto, the caps it starts
// with), unused-parameter search, static graph, gradients as bucket views, bucket rebuild, trace, comm
// hook. Errors: an unknown comm hook. REQUIRES: ValidateConfig(config) is OK.
absl::StatusOr<DdpOptions> DdpOptionsFor(const TrainConfig& config);

// Wraps `model` (on `device`) in DDP over `group` with `options` (usually DdpOptionsFor(config)), after
// converting BatchNorm to SyncBatchNorm with config.sync_bn; rank 0 prints the layout on stderr (every
// bucket with config.print_buckets). Collective. Errors: DDP's, or a CUDA model over a group that is not
// NCCL.
absl::StatusOr<std::shared_ptr<DistributedDataParallel>> WrapDdp(const TrainConfig& config,
                                                                 std::shared_ptr<Module> model, Device device,
                                                                 ProcessGroup* group, const DdpOptions& options);

}  // namespace ddp

#endif  // DDP_TRAIN_SETUP_H_
