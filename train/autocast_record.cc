#include "train/autocast_record.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/cpu_identity.h"

namespace ddp {
namespace {

using Json = nlohmann::ordered_json;

// Fails decoding: a DataLoss error naming the file, the field and the problem.
absl::Status Malformed(const std::string& where, const std::string& field, const std::string& problem) {
  return absl::DataLossError(
      absl::StrCat("checkpoint file ", where, ": \"", kAutocastStateName, ".", field, "\" ", problem));
}

// record[field] as one of `allowed` (an empty list: any string) into `*value`.
absl::Status GetString(const std::string& where, const Json& record, const char* field,
                       const std::vector<std::string>& allowed, std::string* value) {
  const auto it = record.find(field);
  if (it == record.end()) return Malformed(where, field, "is missing");
  if (!it->is_string()) return Malformed(where, field, absl::StrCat("must be a string, got ", it->dump()));
  *value = it->get<std::string>();
  if (allowed.empty()) return absl::OkStatus();
  for (const std::string& name : allowed) {
    if (*value == name) return absl::OkStatus();
  }
  std::string expected;
  for (const std::string& name : allowed)
    absl::StrAppend(&expected, expected.empty() ? "" : ", ", "\"", name, "\"");
  return Malformed(where, field, absl::StrCat("must be one of ", expected, ", got ", it->dump()));
}

bool Bf16OnCpu(const std::string& precision, const std::string& device) {
  return precision == "bf16" && device == "cpu";
}

cpu::Bf16GemmKernel KernelNamed(const std::string& name) {
  return name == "onednn" ? cpu::Bf16GemmKernel::kOneDnn : cpu::Bf16GemmKernel::kFloat32;
}

// "kernel \"onednn\" (oneDNN's bf16 matmul)": a kernel named as DDP_BF16_GEMM names it, and what it is.
std::string KernelWords(const std::string& name) {
  return absl::StrCat("kernel \"", name, "\" (",
                      name == "onednn" ? "oneDNN's bf16 matmul" : "float32 GEMMs of the rounded operands",
                      ")");
}

// This process's CPU as the record names it: CpuIdentity and the bf16 instructions oneDNN finds, which a
// virtual machine may hide on a CPU of the same model.
std::string RecordedCpu() { return absl::StrCat(CpuIdentity(), ", bf16: ", cpu::Bf16Instructions()); }

}  // namespace

AutocastRecord CurrentAutocastRecord(const TrainConfig& config) {
  AutocastRecord record{config.precision, config.device, "", RecordedCpu(), ResolvedMemoryFormat(config)};
  if (Bf16OnCpu(config.precision, config.device)) {
    record.bf16_gemm_kernel = cpu::Bf16GemmKernelName(cpu::ActiveBf16GemmKernel());
  }
  return record;
}

std::string EncodeAutocastRecord(const AutocastRecord& record) {
  Json json({{"precision", record.precision},
             {"device", record.device},
             {"bf16_gemm_kernel", record.bf16_gemm_kernel},
             {"cpu", record.cpu}});
  if (!record.memory_format.empty()) json["memory_format"] = record.memory_format;
  return json.dump();
}

absl::StatusOr<AutocastRecord> DecodeAutocastRecord(absl::string_view text, const std::string& where) {
  const Json record = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) {
    return absl::DataLossError(absl::StrCat("checkpoint file ", where, ": \"", kAutocastStateName,
                                            "\" must be an object, got ",
                                            record.is_discarded() ? std::string(text) : record.dump()));
  }
  AutocastRecord parsed;
  DDP_RETURN_IF_ERROR(GetString(where, record, "precision", {"fp32", "bf16", "fp16"}, &parsed.precision));
  DDP_RETURN_IF_ERROR(GetString(where, record, "device", {"cpu", "cuda"}, &parsed.device));
  const std::vector<std::string> kernels = Bf16OnCpu(parsed.precision, parsed.device)
                                               ? std::vector<std::string>{"onednn", "fp32"}
                                               : std::vector<std::string>{""};
  DDP_RETURN_IF_ERROR(GetString(where, record, "bf16_gemm_kernel", kernels, &parsed.bf16_gemm_kernel));
  DDP_RETURN_IF_ERROR(GetString(where, record, "cpu", {}, &parsed.cpu));
  if (record.contains("memory_format")) {
    DDP_RETURN_IF_ERROR(
        GetString(where, record, "memory_format", {"contiguous", "channels_last"}, &parsed.memory_format));
  }
  return parsed;
}

AutocastResumePlan PlanAutocastResume(const AutocastRecord& saved, const std::string& source,
                                      const TrainConfig& config, const std::string& this_cpu,
                                      cpu::Bf16GemmKernel pinned) {
  AutocastResumePlan plan;
  if (saved.precision != config.precision || saved.device != config.device) {
    plan.notes.push_back(absl::StrCat("--resume: the steps of ", source, " ran --precision=", saved.precision,
                                      " on ", saved.device, ", this run --precision=", config.precision,
                                      " on ", config.device,
                                      ": it continues from their weights, not bit for bit"));
    return plan;
  }
  const std::string layout = ResolvedMemoryFormat(config);
  if (!saved.memory_format.empty() && saved.memory_format != layout) {
    plan.notes.push_back(absl::StrCat("--resume: the steps of ", source, " ran with ", saved.memory_format,
                                      " activations, this run with ", layout,
                                      " ones (--memory_format): it continues from their weights, not bit for "
                                      "bit"));
  } else if (saved.memory_format.empty() && config.memory_format == "auto" && layout == "channels_last") {
    plan.notes.push_back(
        absl::StrCat("--resume: the record of ", source,
                     " does not say which activation layout its steps ran; this run keeps "
                     "resnet18's activations channels-last (--memory_format=auto under bf16); "
                     "if they ran NCHW, --memory_format=contiguous continues them bit for bit"));
  }
  if (!Bf16OnCpu(config.precision, config.device)) return plan;
  const cpu::Bf16GemmKernel recorded = KernelNamed(saved.bf16_gemm_kernel);
  if (pinned != cpu::Bf16GemmKernel::kAuto) {
    if (pinned != recorded) {
      plan.notes.push_back(absl::StrCat("--resume: the steps of ", source, " ran their bf16 GEMMs on ",
                                        KernelWords(saved.bf16_gemm_kernel), ", DDP_BF16_GEMM pins ",
                                        KernelWords(cpu::Bf16GemmKernelName(pinned)),
                                        ": the run continues, not bit for bit"));
    }
    return plan;
  }
  if (saved.cpu == this_cpu) {
    plan.keep_kernel = recorded;
    plan.notes.push_back(absl::StrCat("--resume: bf16 GEMMs on ", KernelWords(saved.bf16_gemm_kernel),
                                      ", which the steps of ", source, " ran on this CPU model (", this_cpu,
                                      "), kept without choosing again so that the run continues bit for bit "
                                      "(DDP_BF16_GEMM overrides; train/autocast_record.h)"));
    return plan;
  }
  plan.compare_kernel_after_choosing = true;
  return plan;
}

std::string ResumeNoteForChosenKernel(const AutocastRecord& saved, const std::string& source,
                                      cpu::Bf16GemmKernel chosen, const std::string& this_cpu) {
  if (cpu::Bf16GemmKernelName(chosen) == saved.bf16_gemm_kernel) return "";
  return absl::StrCat("--resume: the steps of ", source, " ran their bf16 GEMMs on ",
                      KernelWords(saved.bf16_gemm_kernel), " on ", saved.cpu, "; this CPU (", this_cpu,
                      ") runs ", KernelWords(cpu::Bf16GemmKernelName(chosen)),
                      ": the run continues, not bit for bit");
}

absl::Status ApplyAutocastRecord(const std::string& text, const std::string& source,
                                 const TrainConfig& config, bool print) {
  if (text.empty()) return absl::OkStatus();
  DDP_ASSIGN_OR_RETURN(const AutocastRecord saved, DecodeAutocastRecord(text, source + "/manifest.json"));
  const std::string this_cpu = RecordedCpu();
  const AutocastResumePlan plan =
      PlanAutocastResume(saved, source, config, this_cpu, cpu::Bf16GemmKernelFromEnvironment());
  if (plan.keep_kernel.has_value()) cpu::SetBf16GemmKernel(*plan.keep_kernel);
  std::vector<std::string> notes = plan.notes;
  if (plan.compare_kernel_after_choosing) {
    const std::string note = ResumeNoteForChosenKernel(saved, source, cpu::ActiveBf16GemmKernel(), this_cpu);
    if (!note.empty()) notes.push_back(note);
  }
  if (print) {
    for (const std::string& note : notes) std::fprintf(stderr, "%s\n", note.c_str());
  }
  return absl::OkStatus();
}

}  // namespace ddp
