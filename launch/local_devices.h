// What this node offers for --nproc_per_node=auto|cpu|gpu, found without linking CUDA.
#ifndef DDP_LAUNCH_LOCAL_DEVICES_H_
#define DDP_LAUNCH_LOCAL_DEVICES_H_

#include "launch/torchrun_args.h"

namespace ddp {

// CPUs: UsableCpus() (base/usable_cpus.h): the affinity mask (taskset, cpusets), as torch._utils.cpu_count()
// counts, capped by the cgroup's CPU quota (docker --cpus, Kubernetes limits), which torchrun ignores.
// GPUs: NVIDIA device nodes /dev/nvidia0, /dev/nvidia1, ...; when CUDA_VISIBLE_DEVICES is set, at most
// as many as it names ("" or "-1" hides every device), as CUDA would show the program. Thread-safe.
LocalDevices DetectLocalDevices();

}  // namespace ddp

#endif  // DDP_LAUNCH_LOCAL_DEVICES_H_
