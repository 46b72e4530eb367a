// What every CPU backend checks and says about the tensors of a collective (gloo, shm, mpi), so the
// messages read the same whichever backend runs.
#ifndef DDP_COMM_COLLECTIVE_TENSORS_H_
#define DDP_COMM_COLLECTIVE_TENSORS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "tensor/tensor.h"

namespace ddp {

// "1000 float32": what a collective moves, as work descriptions and collective signatures name it.
std::string CollectivePayload(const Tensor& t);

// Aborts (DDP_CHECK) unless `t` is a contiguous CPU tensor: "<op> (<backend>): tensor on cuda:0; the
// <backend> backend takes CPU tensors<hint>" or "<op> (<backend>): tensor must be contiguous".
void CheckCpuCollectiveTensor(const char* op, absl::string_view backend, const Tensor& t,
                              absl::string_view hint = "");

// CheckCpuCollectiveTensor(b), and b has a's element count and dtype: "<op>: tensor [4] does not match [3]".
void CheckMatchingCollectiveTensor(const char* op, absl::string_view backend, const Tensor& a, const Tensor& b);

}  // namespace ddp

#endif  // DDP_COMM_COLLECTIVE_TENSORS_H_
