// The number of CPU threads the compute kernels use (GEMM and the parallel loops).
#ifndef DDP_TENSOR_THREADS_H_
#define DDP_TENSOR_THREADS_H_

namespace ddp {

// Sets the kernel thread count (like torch.set_num_threads) of the calling thread and of the threads its
// parallel regions start. OpenMP keeps it per thread: a thread created elsewhere (a communication worker,
// a DataParallel replica) starts from the process default, OMP_NUM_THREADS or every core, until it sets its
// own. Takes effect from the next op on this thread, oneDNN's included (its cached plans are kept per
// thread count: tensor/onednn_thread_count_test.cc). REQUIRES: n >= 1.
void SetNumThreads(int n);

// The calling thread's kernel thread count.
int GetNumThreads();

}  // namespace ddp

#endif  // DDP_TENSOR_THREADS_H_
