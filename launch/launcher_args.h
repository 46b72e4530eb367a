// Splitting ddprun's command line into its own flags and the worker program (pure).
#ifndef DDP_LAUNCH_LAUNCHER_ARGS_H_
#define DDP_LAUNCH_LAUNCHER_ARGS_H_

#include <string>
#include <vector>

namespace ddp {

// ddprun's arguments, split.
struct SplitArgs {
  // argv[0] and ddprun's flags, each as "--name=value" (ready for absl::ParseCommandLine).
  std::vector<std::string> launcher_args;
  // The worker program and its arguments.
  std::vector<std::string> command;
};

// Splits `argv` at the first positional argument or at "--" (which is dropped). Flags may be
// written "--name=value" or "--name value" (for the names in `value_flags`), and torchrun's
// dashed spellings ("--nproc-per-node") are accepted as the underscore names.
SplitArgs SplitLauncherArgs(const std::vector<std::string>& argv,
                            const std::vector<std::string>& value_flags);

}  // namespace ddp

#endif  // DDP_LAUNCH_LAUNCHER_ARGS_H_
