// The training loop behind examples/train: configuration, epochs, evaluation, metrics, checkpoints, and
// (when started by ddprun / torchrun / mpirun / srun with WORLD_SIZE > 1) DistributedDataParallel, or
// (--mode=dp) DataParallel in one process.
#ifndef DDP_EXAMPLES_TRAINER_H_
#define DDP_EXAMPLES_TRAINER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "ddp/distributed_eval.h"

namespace ddp {

// Everything examples/train's flags set. Defaults are the documented hyper-parameters (README).
struct TrainConfig {
  std::string model = "cnn";        // mlp | cnn | cnn_bn
  int epochs = 5;
  int64_t batch_size = 64;          // per rank, as in PyTorch DDP
  double lr = 0.01;
  double momentum = 0.9;            // SGD only
  double weight_decay = 0.0;
  std::string optimizer = "sgd";    // sgd | adam | adamw
  std::string lr_schedule = "cosine";  // cosine (anneal to 0 over the run) | constant
  uint64_t seed = 0;                // model initialisation and shuffling
  int threads = 1;                  // kernel threads per rank
  std::string device = "cpu";       // cpu | cuda (a --config=cuda build; under DDP, LOCAL_RANK picks the GPU)
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t max_steps = 0;            // stop after this many optimizer steps in total (0: no limit)
  std::string metrics_out;          // JSON Lines, one object per epoch ("" = none; rank 0 writes)
  std::string save;                 // safetensors of the final weights ("" = none; rank 0 writes)
  std::string init_from;            // safetensors of initial weights ("" = random init)
  std::string dump_grads;           // safetensors of the first backward pass's (averaged) gradients
  bool shuffle = true;              // false: samples in file order
  int64_t eval_batch_size = 1000;
  int num_workers = 1;              // DataLoader worker threads per rank (0: load on the training thread)
  bool eval_only = false;           // evaluate init_from's weights on the test set and exit (no training)

  // Distributed (used when the launch environment has WORLD_SIZE > 1).
  std::string backend = "gloo";      // gloo | nccl (needs --device=cuda)
  double bucket_cap_mb = 25;         // DDP bucket cap (0: one bucket per parameter)
  double first_bucket_mb = 1;        // DDP first bucket cap
  bool find_unused_parameters = false;
  bool grad_as_bucket_view = false;
  int accumulate_steps = 1;          // backward passes per optimizer step (no_sync for all but the last)
  std::string comm_hook = "none";    // none | fp16 | bf16
  bool no_rebuild_buckets = false;
  bool print_buckets = false;        // rank 0 prints the bucket layout (and again after the rebuild)
  std::string trace_out;             // Chrome trace JSON of every rank ("" = none)
  bool sync_bn = false;              // convert BatchNorm2d to SyncBatchNorm2d under DDP

  // Checkpoints (checkpoint/checkpoint.h): rank 0 writes, every rank resumes.
  std::string checkpoint_dir;        // where checkpoints go ("" = none)
  int64_t checkpoint_every = 0;      // save after every N optimizer steps (0 = never)
  int keep_checkpoints = 0;          // keep only the newest N step-* checkpoints (0 = keep all)
  bool resume = false;               // continue from checkpoint_dir's latest checkpoint, if there is one
  int64_t check_sync_every = 0;      // DDP: compare parameter/buffer checksums across ranks every N steps
  int64_t fault_inject_step = 0;     // testing: a rank SIGKILLs itself at this step, on the first attempt
  int fault_inject_rank = 1;         // testing: which rank dies
  std::string fault_inject_point = "after_step";  // testing: after_step | backward (examples/fault_injection.h)
  std::string log_samples;           // append the sample indices of every step to this file (examples/sample_log.h)

  // Single-process DataParallel.
  std::string mode = "auto";         // auto: DDP when WORLD_SIZE > 1, else one process | dp: DataParallel
  int dp_devices = 2;                // --mode=dp: CPU workers; --batch_size is the whole batch, split over them
};

// Validates a configuration; the error names the bad flag (e.g. "--batch_size must be >= 1, got 0").
absl::Status ValidateConfig(const TrainConfig& config);

// Runs the whole training described by `config` (invalid: ValidateConfig's error): load data, build
// model and optimizer (and DDP when distributed, DataParallel with --mode=dp), resume from the latest
// checkpoint (resume), train from a DistributedSampler through a DataLoader with a progress display on
// stderr (rank 0), checkpoint every checkpoint_every steps, evaluate after each epoch on every rank
// (EvaluateDistributed: the whole test set, equal to one process), write metrics / weights / gradients
// / trace. With eval_only, only evaluates init_from's weights (under any world size). Returns the final
// test evaluation (the same on every rank); a SIGTERM ends it after the current step with kCancelled.
absl::StatusOr<EvalResult> RunTraining(const TrainConfig& config);

}  // namespace ddp

#endif  // DDP_EXAMPLES_TRAINER_H_
