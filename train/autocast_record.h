// What a checkpoint's steps computed with, beyond the weights: --precision, the device, the activations'
// layout and, for bf16 on the CPU, which bf16 GEMM kernel ran and on which CPU (Note [Autocast record]).
//
// Note [Autocast record]
// Under --precision=bf16 on the CPU, the GEMMs and the convolutions built on them run one of two kernels
// that sum in different orders (Note [bf16 GEMM kernel choice], tensor/cpu_gemm_bf16.h), and on a CPU with
// AVX512_BF16 and no AMX the process picks one by timing both. A resumed run continues bit for bit only
// on the kernel the interrupted run used. So every checkpoint keeps an "autocast" extra state (JSON:
// precision, device, bf16_gemm_kernel, and cpu: CpuIdentity with the bf16 instructions oneDNN finds, which
// a virtual machine may hide, and memory_format, the layout --memory_format resolved to, since the two
// layouts sum in different orders too), and --resume, on every rank:
//   - under --precision=bf16 on the same CPU (vendor, family, model, bf16 instructions) with DDP_BF16_GEMM
//     unset, keeps the recorded kernel instead of choosing again, so neither a timing disturbed by a busy
//     neighbour nor a DDP_BF16_GEMM given to the interrupted run and forgotten on resume can switch kernels
//     mid-run;
//   - otherwise chooses as usual, and rank 0 says when the run continues on another kernel, precision,
//     device or activation layout than the checkpoint's steps: from the same weights, but not bit for bit.
// A checkpoint without the record (written before it existed, or by another program) resumes as before.
#ifndef DDP_TRAIN_AUTOCAST_RECORD_H_
#define DDP_TRAIN_AUTOCAST_RECORD_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensor/cpu_gemm_bf16.h"
#include "train/train_config.h"

namespace ddp {

// The extra-state name of the record: "autocast".
inline constexpr char kAutocastStateName[] = "autocast";

// What the steps before a checkpoint computed with.
struct AutocastRecord {
  std::string precision;         // --precision: "fp32", "bf16" or "fp16"
  std::string device;            // --device: "cpu" or "cuda"
  std::string bf16_gemm_kernel;  // bf16 on the CPU: "onednn" or "fp32" (Bf16GemmKernelName); else empty
  std::string cpu;               // CpuIdentity() and bf16 instructions of the process that wrote it
  std::string memory_format;     // "contiguous" or "channels_last" (ChannelsLastActivations); empty: not
                                 // recorded (a record written before the field existed)
};

// The record of this process under `config` (the bf16 kernel resolved now if no bf16 GEMM has run yet).
AutocastRecord CurrentAutocastRecord(const TrainConfig& config);

// The record as JSON text ({"precision": ..., "device": ..., "bf16_gemm_kernel": ..., "cpu": ...,
// "memory_format": ...}; no "memory_format" when it is empty).
std::string EncodeAutocastRecord(const AutocastRecord& record);

// Parses EncodeAutocastRecord's text read from `where` (the file it came from). A malformed record is a
// DataLoss error "checkpoint file <where>: \"autocast.<field>\" <problem>".
absl::StatusOr<AutocastRecord> DecodeAutocastRecord(absl::string_view text, const std::string& where);

// What --resume does about the record: the kernel to keep (SetBf16GemmKernel before the first bf16 GEMM),
// and the lines rank 0 prints. `compare_kernel_after_choosing`: the run chooses its kernel as usual and
// should say if that is not `saved.bf16_gemm_kernel` (ResumeNoteForChosenKernel).
struct AutocastResumePlan {
  std::optional<cpu::Bf16GemmKernel> keep_kernel;
  bool compare_kernel_after_choosing = false;
  std::vector<std::string> notes;
};

// The plan for resuming `saved` (from checkpoint `source`) under `config` on a CPU identified as
// `this_cpu`, with DDP_BF16_GEMM pinning `pinned` (kAuto: not set). Pure: measures and prints nothing.
AutocastResumePlan PlanAutocastResume(const AutocastRecord& saved, const std::string& source,
                                      const TrainConfig& config, const std::string& this_cpu,
                                      cpu::Bf16GemmKernel pinned);

// The line to print when the kernel this run chose (`chosen`) differs from the record's; empty when not.
std::string ResumeNoteForChosenKernel(const AutocastRecord& saved, const std::string& source,
                                      cpu::Bf16GemmKernel chosen, const std::string& this_cpu);

// --resume: reads the "autocast" extra state `text` of checkpoint `source` (empty: no record, nothing to
// do), keeps or compares the bf16 kernel by PlanAutocastResume, and prints the notes on stderr when
// `print` (rank 0). Errors: a malformed record (DecodeAutocastRecord's).
absl::Status ApplyAutocastRecord(const std::string& text, const std::string& source,
                                 const TrainConfig& config, bool print);

}  // namespace ddp

#endif  // DDP_TRAIN_AUTOCAST_RECORD_H_
