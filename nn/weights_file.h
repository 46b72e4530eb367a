// Model weights in a file of either format a user brings or takes: torch.save's (nn/torch_save.h) or
// safetensors (nn/safetensors.h). --init_from and --save go through here.
#ifndef DDP_NN_WEIGHTS_FILE_H_
#define DDP_NN_WEIGHTS_FILE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/module.h"

namespace ddp {

// Loads the weights at `path` into module.LoadStateDict(strict), the format told by the file's first
// bytes (torch.save's ZIP archive or legacy stream, else safetensors). As PyTorch's load_state_dict
// copies, a float16 or bfloat16 tensor loads into a float32 one (widened exactly). When none of the file's
// names is the module's but all are after removing one prefix they share ("model." of a Lightning
// checkpoint's state_dict, any "<name>."), it is removed. Returns the notes of what was done on the
// way (the torch.save reader's, and the widening), one sentence each, for the caller to print. Errors
// name the file and each missing, unexpected or mismatching tensor; the module is untouched on error.
// With `keep_initial` (name prefixes such as "fc."), the module's tensors whose names start with one keep
// their values and the file's are not loaded (fine-tuning with a new head, where the file's has another
// shape); a prefix that names none of the module's tensors is an InvalidArgument error naming it.
absl::StatusOr<std::vector<std::string>> LoadModuleWeights(Module& module, const std::string& path,
                                                           bool strict = true,
                                                           const std::vector<std::string>& keep_initial = {});

// True when `path` ends in ".pt" or ".pth", the extensions PyTorch users give torch.save files.
bool IsTorchSavePath(const std::string& path);

// Saves module.StateDict() atomically: in torch.save's format when IsTorchSavePath(path) (torch.load
// reads it), else as safetensors.
absl::Status SaveModuleWeights(const Module& module, const std::string& path);

}  // namespace ddp

#endif  // DDP_NN_WEIGHTS_FILE_H_
