#ifndef DDP_TESTING_SILENT_CONNECTIONS_H_
#define DDP_TESTING_SILENT_CONNECTIONS_H_

#include <vector>

namespace ddp {

// Starts up to `count` non-blocking TCP connections to 127.0.0.1:`port` that never send a byte (a
// half-open flood, as a misbehaving client makes); returns their descriptors, open, for the caller to
// close. Stops early, with fewer descriptors, when the process runs out of them.
std::vector<int> SilentConnections(int port, int count);

}  // namespace ddp

#endif  // DDP_TESTING_SILENT_CONNECTIONS_H_
