// examples/train: trains mlp / cnn / cnn_bn on Fashion-MNIST, in one process or, under ddprun (or
// torchrun-style variables with WORLD_SIZE > 1), with DistributedDataParallel.
//
//   bazel-bin/examples/train --model=cnn --epochs=5
//   bazel-bin/launch/ddprun --nproc_per_node=2 bazel-bin/examples/train --model=cnn
//   bazel-bin/launch/ddprun --nproc_per_node=3 bazel-bin/examples/train --eval_only --init_from=w.safetensors
//
// Flags and defaults: examples/trainer.h (TrainConfig) and README.md.
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "comm/init.h"
#include "examples/graceful_stop.h"
#include "examples/trainer.h"

namespace {
const ddp::TrainConfig kDefaults;
}  // namespace

ABSL_FLAG(std::string, model, kDefaults.model, "mlp | cnn | cnn_bn");
ABSL_FLAG(int, epochs, kDefaults.epochs, "number of passes over the training set");
ABSL_FLAG(int64_t, batch_size, kDefaults.batch_size, "samples per step");
ABSL_FLAG(double, lr, kDefaults.lr, "learning rate");
ABSL_FLAG(double, momentum, kDefaults.momentum, "SGD momentum");
ABSL_FLAG(double, weight_decay, kDefaults.weight_decay, "L2 penalty (decoupled for adamw)");
ABSL_FLAG(std::string, optimizer, kDefaults.optimizer, "sgd | adam | adamw");
ABSL_FLAG(std::string, lr_schedule, kDefaults.lr_schedule, "cosine (anneal to 0 over the run) | constant");
ABSL_FLAG(uint64_t, seed, kDefaults.seed, "seed for initialisation and shuffling");
ABSL_FLAG(int, threads, kDefaults.threads, "CPU threads for the kernels");
ABSL_FLAG(std::string, device, kDefaults.device,
          "cpu | cuda (--config=cuda build; one GPU per rank, LOCAL_RANK picks it; DDP over cuda needs --backend=nccl)");
ABSL_FLAG(std::string, data_dir, kDefaults.data_dir, "folder with the Fashion-MNIST IDX files");
ABSL_FLAG(int64_t, max_steps, kDefaults.max_steps, "stop after this many steps (0: no limit)");
ABSL_FLAG(std::string, metrics_out, "", "append one JSON line per epoch to this file");
ABSL_FLAG(std::string, save, "", "write the final weights to this safetensors file");
ABSL_FLAG(std::string, init_from, "", "load initial weights from this safetensors file");
ABSL_FLAG(std::string, dump_grads, "", "write the first backward pass's gradients to this safetensors file");
ABSL_FLAG(bool, shuffle, kDefaults.shuffle, "shuffle the training set each epoch (false: file order)");
ABSL_FLAG(std::string, backend, kDefaults.backend, "gloo | nccl (used when WORLD_SIZE > 1)");
ABSL_FLAG(double, bucket_cap_mb, kDefaults.bucket_cap_mb, "DDP bucket cap in MiB (0: one bucket per parameter)");
ABSL_FLAG(double, first_bucket_mb, kDefaults.first_bucket_mb, "DDP first bucket cap in MiB");
ABSL_FLAG(bool, find_unused_parameters, kDefaults.find_unused_parameters, "DDP: search for unused parameters");
ABSL_FLAG(bool, grad_as_bucket_view, kDefaults.grad_as_bucket_view, "DDP: gradients are views into buckets");
ABSL_FLAG(int, accumulate_steps, kDefaults.accumulate_steps, "backward passes per optimizer step (no_sync)");
ABSL_FLAG(std::string, comm_hook, kDefaults.comm_hook, "none | fp16 | bf16 gradient compression");
ABSL_FLAG(bool, no_rebuild_buckets, kDefaults.no_rebuild_buckets, "DDP: keep the initial bucket layout");
ABSL_FLAG(bool, print_buckets, kDefaults.print_buckets, "rank 0 prints the DDP bucket layout");
ABSL_FLAG(std::string, trace_out, "", "write a Chrome trace (Perfetto) of every rank to this file");
ABSL_FLAG(bool, sync_bn, kDefaults.sync_bn, "DDP: convert BatchNorm2d layers to SyncBatchNorm2d");
ABSL_FLAG(std::string, checkpoint_dir, "", "directory for checkpoints (rank 0 writes them atomically)");
ABSL_FLAG(int64_t, checkpoint_every, kDefaults.checkpoint_every, "save a checkpoint every N optimizer steps");
ABSL_FLAG(int, keep_checkpoints, kDefaults.keep_checkpoints,
          "keep only the newest N checkpoints in --checkpoint_dir (0: keep all)");
ABSL_FLAG(bool, resume, kDefaults.resume, "continue from the latest checkpoint in --checkpoint_dir, if any");
ABSL_FLAG(int64_t, check_sync_every, kDefaults.check_sync_every,
          "DDP: every N steps, check that all ranks hold identical parameters and buffers (names the first that differs)");
ABSL_FLAG(int64_t, fault_inject_step, kDefaults.fault_inject_step,
          "testing: --fault_inject_rank kills itself (SIGKILL) at this step when DDP_RESTART_COUNT is 0");
ABSL_FLAG(int, fault_inject_rank, kDefaults.fault_inject_rank, "testing: the rank --fault_inject_step kills");
ABSL_FLAG(std::string, fault_inject_point, kDefaults.fault_inject_point,
          "testing: after_step (once the step is done) | backward (in the middle of the next backward pass)");
ABSL_FLAG(std::string, log_samples, "",
          "append a line per step and rank with the dataset indices trained on to this file");
ABSL_FLAG(std::string, mode, kDefaults.mode, "auto (DDP under ddprun, else one process) | dp (DataParallel over CPU workers)");
ABSL_FLAG(int, dp_devices, kDefaults.dp_devices, "--mode=dp: number of CPU workers");
ABSL_FLAG(int, num_workers, kDefaults.num_workers, "DataLoader worker threads per rank (0: load on the training thread)");
ABSL_FLAG(bool, eval_only, kDefaults.eval_only, "evaluate --init_from's weights on the test set (any world size) and exit");
ABSL_FLAG(int64_t, eval_batch_size, kDefaults.eval_batch_size, "samples per evaluation forward pass and rank");

int main(int argc, char** argv) {
  ddp::InstallGracefulStop();  // before any thread starts (examples/graceful_stop.h)
  absl::SetProgramUsageMessage("Trains a model on Fashion-MNIST. Example: train --model=cnn --epochs=5");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "train: unexpected argument \"%s\" (flags are --name=value)\n", positional[1]);
    return 2;
  }
  ddp::TrainConfig config;
  config.model = absl::GetFlag(FLAGS_model);
  config.epochs = absl::GetFlag(FLAGS_epochs);
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.lr = absl::GetFlag(FLAGS_lr);
  config.momentum = absl::GetFlag(FLAGS_momentum);
  config.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  config.optimizer = absl::GetFlag(FLAGS_optimizer);
  config.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.threads = absl::GetFlag(FLAGS_threads);
  config.device = absl::GetFlag(FLAGS_device);
  config.data_dir = absl::GetFlag(FLAGS_data_dir);
  config.max_steps = absl::GetFlag(FLAGS_max_steps);
  config.metrics_out = absl::GetFlag(FLAGS_metrics_out);
  config.save = absl::GetFlag(FLAGS_save);
  config.init_from = absl::GetFlag(FLAGS_init_from);
  config.dump_grads = absl::GetFlag(FLAGS_dump_grads);
  config.shuffle = absl::GetFlag(FLAGS_shuffle);
  config.backend = absl::GetFlag(FLAGS_backend);
  config.bucket_cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb);
  config.first_bucket_mb = absl::GetFlag(FLAGS_first_bucket_mb);
  config.find_unused_parameters = absl::GetFlag(FLAGS_find_unused_parameters);
  config.grad_as_bucket_view = absl::GetFlag(FLAGS_grad_as_bucket_view);
  config.accumulate_steps = absl::GetFlag(FLAGS_accumulate_steps);
  config.comm_hook = absl::GetFlag(FLAGS_comm_hook);
  config.no_rebuild_buckets = absl::GetFlag(FLAGS_no_rebuild_buckets);
  config.print_buckets = absl::GetFlag(FLAGS_print_buckets);
  config.trace_out = absl::GetFlag(FLAGS_trace_out);
  config.sync_bn = absl::GetFlag(FLAGS_sync_bn);
  config.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  config.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  config.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  config.resume = absl::GetFlag(FLAGS_resume);
  config.check_sync_every = absl::GetFlag(FLAGS_check_sync_every);
  config.fault_inject_step = absl::GetFlag(FLAGS_fault_inject_step);
  config.fault_inject_rank = absl::GetFlag(FLAGS_fault_inject_rank);
  config.fault_inject_point = absl::GetFlag(FLAGS_fault_inject_point);
  config.log_samples = absl::GetFlag(FLAGS_log_samples);
  config.mode = absl::GetFlag(FLAGS_mode);
  config.dp_devices = absl::GetFlag(FLAGS_dp_devices);
  config.num_workers = absl::GetFlag(FLAGS_num_workers);
  config.eval_only = absl::GetFlag(FLAGS_eval_only);
  config.eval_batch_size = absl::GetFlag(FLAGS_eval_batch_size);
  if (absl::Status valid = ddp::ValidateConfig(config); !valid.ok()) {
    std::fprintf(stderr, "train: usage error: %s\n", std::string(valid.message()).c_str());
    return 2;
  }
  absl::StatusOr<ddp::EvalResult> result = ddp::RunTraining(config);
  if (!result.ok()) {
    std::fprintf(stderr, "train: %s\n", result.status().ToString().c_str());
    return absl::IsCancelled(result.status()) && ddp::GracefulStopRequested() ? 128 + SIGTERM : 1;
  }
  // Every rank holds the same (distributed) evaluation; rank 0 reports it.
  absl::StatusOr<ddp::LaunchEnv> launch = ddp::ResolveLaunchEnv(ddp::ProcessEnv());
  if (launch.ok() && launch->rank == 0) {
    std::printf("final test_acc %.4f test_loss %.4f\n", result->accuracy, result->loss);
  }
  return 0;
}
