#include "testing/worker_env.h"

#include <optional>

namespace ddp {

EnvLookup WorkerEnvForInitMethod(const std::string& init_method) {
  EnvLookup process = ProcessEnv();
  if (init_method == "env://") return process;
  return [process](const std::string& name) -> std::optional<std::string> {
    if (name == "DDP_STORE_IN_LAUNCHER") return std::nullopt;
    return process(name);
  };
}

}  // namespace ddp
