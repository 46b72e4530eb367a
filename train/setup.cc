#include "train/setup.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/check.h"
#include "ddp/sync_batch_norm.h"
#include "nn/adam.h"
#include "nn/models.h"
#include "nn/resnet.h"
#include "nn/sgd.h"
#include "nn/weights_file.h"
#include "reducer/comm_hook.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {
namespace {

// Moves every parameter and buffer of `model` to `device` in place (torch's module.to(device)); the
// handles the optimizer and DDP will hold stay valid. REQUIRES: no gradients yet.
void MoveModel(Module& model, Device device) {
  if (device.is_cpu()) return;
#ifdef DDP_WITH_CUDA
  for (const Tensor& p : model.Parameters()) cuda::MoveToDeviceInPlace(p, device);
  for (const Tensor& b : model.Buffers()) cuda::MoveToDeviceInPlace(b, device);
#else
  (void)model;
#endif
}

// The catalog's entry for config.dataset, which ValidateConfig accepted.
ImageDatasetInfo DatasetInfo(const TrainConfig& config) {
  absl::StatusOr<ImageDatasetInfo> data = FindImageDataset(config.dataset);
  DDP_CHECK(data.ok()) << data.status();
  return *std::move(data);
}

}  // namespace

ModelInput ModelInputFor(const TrainConfig& config) {
  const ImageDatasetInfo data = DatasetInfo(config);
  return ModelInput{data.image_shape, data.num_classes};
}

std::string DataFolder(const TrainConfig& config) {
  return config.data_dir.empty() ? DatasetInfo(config).default_dir : config.data_dir;
}

absl::StatusOr<std::shared_ptr<ImageDataset>> LoadDataSplit(const TrainConfig& config, Split split) {
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<ImageDataset> data,
                       LoadImageDataset(config.dataset, DataFolder(config), split));
  const Shape want = ModelInputFor(config).image_shape;
  if (data->image_shape() != want) {
    return absl::InvalidArgumentError(absl::StrCat("the ", split == Split::kTrain ? "training" : "test",
                                                   " set's images are ", ShapeToString(data->image_shape()),
                                                   " but --model=", config.model,
                                                   " was built for --dataset=", config.dataset, "'s ",
                                                   ShapeToString(want), " (in ", DataFolder(config), ")"));
  }
  if (split == Split::kTrain) {
    // The seed's draws are apart from the initialisation's and the sampler's, which take config.seed as is.
    data->set_augmentation(
        RandomCropFlip{config.random_crop_padding, config.random_flip, config.seed ^ 0x6175676D656E74ull});
  }
  return data;
}

std::string DescribeData(const TrainConfig& config, const ImageDataset* train, const ImageDataset& test) {
  const ModelInput input = ModelInputFor(config);
  std::string line = absl::StrCat("data: ", config.dataset, " from ", DataFolder(config), ": ");
  if (train != nullptr) absl::StrAppend(&line, train->Size(), " training and ");
  absl::StrAppend(&line, test.Size(), " test images of ", ShapeToString(input.image_shape), " in ",
                  input.num_classes, " classes");
  if (train == nullptr) return line;
  const RandomCropFlip& augmentation = train->augmentation();
  if (augmentation.padding > 0 && augmentation.horizontal_flip) {
    absl::StrAppend(&line, "; random crops (padding ", augmentation.padding, ") and flips");
  } else if (augmentation.padding > 0) {
    absl::StrAppend(&line, "; random crops (padding ", augmentation.padding, ")");
  } else if (augmentation.horizontal_flip) {
    absl::StrAppend(&line, "; random flips");
  }
  return line;
}

absl::StatusOr<std::shared_ptr<Module>> BuildModel(const TrainConfig& config, Device device,
                                                   std::vector<std::string>* init_notes) {
  Generator init_generator(config.seed);
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<Module> model,
                       MakeModel(config.model, init_generator, ModelInputFor(config)));
  if (!config.init_from.empty()) {
    const std::vector<std::string> excluded =
        absl::StrSplit(config.init_from_exclude, ',', absl::SkipWhitespace());
    DDP_ASSIGN_OR_RETURN(std::vector<std::string> notes,
                         LoadModuleWeights(*model, config.init_from, /*strict=*/true, excluded));
    if (init_notes != nullptr) *init_notes = std::move(notes);
  }
  if (auto* resnet = dynamic_cast<nn::ResNet*>(model.get())) {
    resnet->set_channels_last(ChannelsLastActivations(config));
  }
  MoveModel(*model, device);
  return model;
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const TrainConfig& config, const std::vector<Tensor>& params) {
  if (config.optimizer == "sgd") {
    SgdOptions options;
    options.lr = config.lr;
    options.momentum = config.momentum;
    options.weight_decay = config.weight_decay;
    return std::unique_ptr<Optimizer>(new Sgd(params, options));
  }
  AdamOptions options;
  options.lr = config.lr;
  options.weight_decay = config.weight_decay;
  if (config.optimizer == "adamw") return std::unique_ptr<Optimizer>(new AdamW(params, options));
  return std::unique_ptr<Optimizer>(new Adam(params, options));
}

absl::StatusOr<DdpOptions> DdpOptionsFor(const TrainConfig& config) {
  DdpOptions options;
  options.reducer.caps.bucket_cap_bytes = static_cast<size_t>(BucketCapMiB(config) * (1 << 20));
  options.reducer.caps.first_bucket_cap_bytes = static_cast<size_t>(config.first_bucket_mb * (1 << 20));
  options.reducer.find_unused_parameters = config.find_unused_parameters;
  options.reducer.static_graph = config.static_graph;
  options.reducer.gradient_as_bucket_view = config.grad_as_bucket_view;
  options.reducer.rebuild_buckets = !config.no_rebuild_buckets;
  options.reducer.record_trace = !config.trace_out.empty();
  PowerSgdOptions powersgd;
  powersgd.matrix_approximation_rank = config.powersgd_rank;
  powersgd.start_iter = config.powersgd_start_iter;
  powersgd.min_compression_rate = config.powersgd_min_compression_rate;
  DDP_ASSIGN_OR_RETURN(options.reducer.comm_hook, MakeCommHook(config.comm_hook, powersgd));
  if (config.reduce_dtype == "bf16") options.mixed_precision.reduce_dtype = DType::kBFloat16;
  return options;
}

absl::StatusOr<std::shared_ptr<DistributedDataParallel>> WrapDdp(const TrainConfig& config,
                                                                 std::shared_ptr<Module> model, Device device,
                                                                 ProcessGroup* group, const DdpOptions& options) {
  if (device.is_cuda() && group->backend_name() != "nccl") {
    return absl::InvalidArgumentError("under DDP, --device=cuda needs --backend=nccl (Gloo takes CPU tensors)");
  }
  if (config.sync_bn) ConvertSyncBatchNorm(*model, group);
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<DistributedDataParallel> ddp,
                       DistributedDataParallel::Create(std::move(model), group, options));
  if (group->rank() == 0) {
    std::fprintf(stderr, "DDP: %d ranks over %s, %d buckets\n", group->size(), group->backend_name().c_str(),
                 static_cast<int>(ddp->reducer().bucket_assignment().size()));
    if (config.print_buckets) std::fprintf(stderr, "%s", ddp->reducer().DescribeBuckets().c_str());
  }
  return ddp;
}

}  // namespace ddp
