// DescribeBytes: a byte count as people read it in an error message.
#ifndef DDP_BASE_DESCRIBE_BYTES_H_
#define DDP_BASE_DESCRIBE_BYTES_H_

#include <cstdint>
#include <string>

namespace ddp {

// "1234 bytes" (below 64 KiB), "64.0 MiB" (below 1 GiB), "1.00 GiB". Pure.
std::string DescribeBytes(int64_t bytes);

}  // namespace ddp

#endif  // DDP_BASE_DESCRIBE_BYTES_H_
