// The number of CPU threads the compute kernels use (GEMM and the parallel loops).
#ifndef DDP_TENSOR_THREADS_H_
#define DDP_TENSOR_THREADS_H_

namespace ddp {

// Sets the kernel thread count for the whole process (like torch.set_num_threads). REQUIRES: n >= 1.
// Call before training starts; not meant to be changed while kernels run.
void SetNumThreads(int n);

// The current kernel thread count.
int GetNumThreads();

}  // namespace ddp

#endif  // DDP_TENSOR_THREADS_H_
