#include "launch/launcher_args.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"

namespace ddp {
namespace {

// "--nproc-per-node=2" -> "--nproc_per_node=2" (the value is left alone).
std::string NormaliseFlag(const std::string& arg) {
  const size_t eq = arg.find('=');
  const size_t name_end = eq == std::string::npos ? arg.size() : eq;
  const size_t dashes = absl::StartsWith(arg, "--") ? 2 : 1;
  std::string name = absl::StrReplaceAll(arg.substr(dashes, name_end - dashes), {{"-", "_"}});
  return "--" + name + arg.substr(name_end);
}

}  // namespace

SplitArgs SplitLauncherArgs(const std::vector<std::string>& argv,
                            const std::vector<std::string>& value_flags) {
  SplitArgs split;
  if (argv.empty()) return split;
  split.launcher_args.push_back(argv[0]);
  size_t i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // First positional: the program.
    std::string flag = NormaliseFlag(arg);
    const bool has_value = flag.find('=') != std::string::npos;
    const std::string name = flag.substr(2);
    const bool takes_value =
        std::find(value_flags.begin(), value_flags.end(), name) != value_flags.end();
    if (!has_value && takes_value && i + 1 < argv.size()) flag += "=" + argv[++i];
    split.launcher_args.push_back(flag);
  }
  split.command.assign(argv.begin() + i, argv.end());
  return split;
}

}  // namespace ddp
