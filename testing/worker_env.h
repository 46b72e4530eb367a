// The environment a test worker passes to InitProcessGroup for a given --init_method.
#ifndef DDP_TESTING_WORKER_ENV_H_
#define DDP_TESTING_WORKER_ENV_H_

#include <string>

#include "store/launch_env.h"

namespace ddp {

// The process environment for env://; for any other init method (tcp://, file://) the same environment
// with DDP_STORE_IN_LAUNCHER hidden, because the store then lives at the URL given (hosted by rank 0 for
// tcp://), not in the launcher that may have started the worker.
EnvLookup WorkerEnvForInitMethod(const std::string& init_method);

}  // namespace ddp

#endif  // DDP_TESTING_WORKER_ENV_H_
