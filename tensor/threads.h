// The number of CPU threads the compute kernels use (GEMM and the parallel loops).
#ifndef DDP_TENSOR_THREADS_H_
#define DDP_TENSOR_THREADS_H_

namespace ddp {

// Sets the kernel thread count (like torch.set_num_threads) of the calling thread and of the threads its
// parallel regions start. OpenMP keeps it per thread: a thread created elsewhere (a communication worker,
// a DataParallel replica) starts from the process default, OMP_NUM_THREADS or every core, until it sets its
// own. REQUIRES: n >= 1. Call before training starts; not meant to be changed while kernels run.
void SetNumThreads(int n);

// The calling thread's kernel thread count.
int GetNumThreads();

}  // namespace ddp

#endif  // DDP_TENSOR_THREADS_H_
