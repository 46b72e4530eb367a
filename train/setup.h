// The pieces train/train builds before its loop, from a TrainConfig: the data, the model, DDP's options and
// the wrapped model, the optimizer. bench/train_throughput builds the same pieces with them, so that the
// benchmark times what train/train runs.
#ifndef DDP_TRAIN_SETUP_H_
#define DDP_TRAIN_SETUP_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "data/image_dataset_catalog.h"
#include "ddp/distributed_data_parallel.h"
#include "nn/models.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "tensor/tensor.h"
#include "train/train_config.h"

namespace ddp {

// What config.model is built for: config.dataset's image shape and number of classes.
// REQUIRES: ValidateConfig(config) is OK.
ModelInput ModelInputFor(const TrainConfig& config);

// The folder config.dataset is read from: config.data_dir, or the data set's default when that is "".
// REQUIRES: ValidateConfig(config) is OK.
std::string DataFolder(const TrainConfig& config);

// `split` of config.dataset from DataFolder(config) (data/image_dataset_catalog.h), its images checked
// against the model's input: a set of another shape (IDX files of another size) is InvalidArgument naming
// the split, both shapes and the folder, e.g. "the test set's images are [1, 14, 56] but --model=cnn was
// built for --dataset=fashion_mnist's [1, 28, 28] (in /d)". The training split draws
// --random_crop_padding / --random_flip crops and flips seeded by --seed; TrainEpoch sets their epoch.
absl::StatusOr<std::shared_ptr<ImageDataset>> LoadDataSplit(const TrainConfig& config, Split split);

// One line saying what the run trains and evaluates on, for rank 0 to print at start, e.g.
//   "data: cifar10 from /d: 50000 training and 10000 test images of [3, 32, 32] in 10 classes; random crops
//   (padding 4) and flips"
// `train` may be null (--eval_only: the test set only).
std::string DescribeData(const TrainConfig& config, const ImageDataset* train, const ImageDataset& test);

// The model of config.model for ModelInputFor(config), initialised from config.seed (or loaded from
// config.init_from, a safetensors or torch.save file: nn/weights_file.h), with its parameters and buffers
// on `device`. When `init_notes` is given it receives what loading config.init_from did on the way (the
// key a checkpoint's state_dict was taken from, a "module." prefix removed, dtypes converted), one
// sentence each. Errors: an unknown model, an unreadable or mismatched init file.
absl::StatusOr<std::shared_ptr<Module>> BuildModel(const TrainConfig& config, Device device,
                                                   std::vector<std::string>* init_notes = nullptr);

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
