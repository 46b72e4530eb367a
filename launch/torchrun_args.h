// ddprun's command line: torchrun's flags (both spellings, PET_* defaults), ddprun's own flags, and the
// rule that turns the script into the command every worker runs. Pure except for the PATH lookup of
// the program (ResolveWorkerCommand) and the device counts the caller passes in.
// The flag parity table (torchrun flag, ours, tested by) is in docs/launch.md.
#ifndef DDP_LAUNCH_TORCHRUN_ARGS_H_
#define DDP_LAUNCH_TORCHRUN_ARGS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "launch/launcher.h"

namespace ddp {

// What the machine offers, for --nproc_per_node=auto|cpu|gpu.
struct LocalDevices {
  int cpus = 1;  // CPUs this process may use (UsableCpus: affinity mask capped by the cgroup CPU quota).
  int gpus = 0;  // CUDA devices visible to this process (launch/local_devices.h).
};

// The command line, parsed.
struct DdprunCommandLine {
  // --help / -h was given: print DdprunUsage() and exit 0 (nothing else is filled in).
  bool help = false;
  // Everything the launcher needs; options.command is the final worker command (Python prepended when
  // the script is run with Python, see ResolveWorkerCommand).
  LaunchOptions options;
  // Notices torchrun prints as warnings for flags it ignores (e.g. --node_rank with c10d); ddprun
  // prints them on stderr, prefixed "ddprun: ".
  std::vector<std::string> warnings;
};

// Parses `argv` (argv[0] is the program name). `env` is the launcher's environment: PET_<FLAG>
// variables give flag defaults as torchrun's do (PET_NPROC_PER_NODE=4), PYTHON_EXEC names the
// interpreter. Flags are read up to the first positional argument (the script) or "--"; everything
// after belongs to the script. Both "--nproc_per_node" and "--nproc-per-node", "--flag=value" and
// "--flag value", and torchrun's short forms "-m", "-r V", "-t V" are accepted. Errors (kInvalidArgument)
// name the flag and say why: an unknown flag, a bad value, or a torchrun flag that has no meaning for
// ddprun (e.g. "--start_method=fork: ddprun starts every worker with fork+exec of a fresh program,
// torchrun's 'spawn'; there is no Python parent to fork from").
absl::StatusOr<DdprunCommandLine> ParseDdprunCommandLine(const std::vector<std::string>& argv,
                                                         const std::map<std::string, std::string>& env,
                                                         const LocalDevices& devices);

// The --help text: every flag, its default and what it does.
std::string DdprunUsage();

// Resolves --nproc_per_node: an integer, or "cpu" (devices.cpus), "gpu" (devices.gpus; an error when
// there is none, as torchrun's "Cuda is not available."), "auto" (gpus when any, else cpus).
absl::StatusOr<int> ResolveNprocPerNode(absl::string_view text, const LocalDevices& devices);

// How the script named on the command line is run (Note [Which interpreter]).
struct ScriptMode {
  bool module = false;     // -m: `python -u -m script args`.
  bool no_python = false;  // --no_python: run `script args` itself.
  bool run_path = false;   // --run_path: runpy.run_path(script) in a fresh interpreter.
};

// Note [Which interpreter]: torchrun runs `$PYTHON_EXEC -u script args` (its own sys.executable when
// PYTHON_EXEC is unset). ddprun is not a Python program, so its interpreter is $PYTHON_EXEC, else
// `python3` found on PATH. Every program in this repository is a binary, and ddprun has always run
// `ddprun ... bazel-bin/train/train`; so a script that resolves (as exec would: PATH search for a name
// without '/') to an executable file whose name does not end in ".py" is run as itself, as with
// --no_python. Everything else (a .py file, a file without execute permission, a module) goes to Python
// as under torchrun. --run_path runs `python -u -c <runpy.run_path(script, run_name="__main__")>` with
// sys.argv set, which is what torchrun does in its own interpreter.
// Returns the worker command, or kInvalidArgument (-m with --no_python; --run_path with a relative path,
// as torchrun requires an absolute one; a script that is neither a file nor a program on PATH, which
// torchrun would leave to Python's "can't open file" in every worker; no Python interpreter).
absl::StatusOr<std::vector<std::string>> ResolveWorkerCommand(const std::vector<std::string>& script_and_args,
                                                              const ScriptMode& mode,
                                                              const std::map<std::string, std::string>& env);

}  // namespace ddp

#endif  // DDP_LAUNCH_TORCHRUN_ARGS_H_
