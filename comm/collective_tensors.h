// What the CPU backends check about the tensors of a collective (comm/queued_process_group.h runs the
// checks for gloo, shm, mpi and the hierarchical group), so the messages read the same whichever backend
// runs. A failed check is a caller's broken precondition: it aborts (DDP_CHECK), as the REQUIRES clauses
// of comm/process_group.h say.
#ifndef DDP_COMM_COLLECTIVE_TENSORS_H_
#define DDP_COMM_COLLECTIVE_TENSORS_H_

#include <cstddef>
#include <vector>

#include "comm/collective_description.h"
#include "tensor/tensor.h"

namespace ddp {

// Aborts unless `t` is a contiguous CPU tensor: "<op> (<backend>): tensor on cuda:0; the <backend>
// backend takes CPU tensors<hint>" or "<op> (<backend>): tensor must be contiguous", <op> the name of
// `kind`. The text is built only on failure (this runs on every call of the smallest collectives).
void CheckCpuCollectiveTensor(CollectiveKind kind, const char* backend, const Tensor& t, const char* hint = "");

// Aborts unless `list` holds `expected` tensors, each with `like`'s element count and dtype:
// "<op>: 3 <what> for a group of 2" or "<op>: <what> tensor [4] float32 does not match [3] float32".
// `what` names the list ("outputs", "inputs").
void CheckCollectiveList(const char* op, const char* what, const std::vector<Tensor>& list, size_t expected,
                         const Tensor& like);

// Aborts unless 0 <= root < size: "<op>: root 4 outside a group of 4".
void CheckCollectiveRoot(const char* op, int root, int size);

}  // namespace ddp

#endif  // DDP_COMM_COLLECTIVE_TENSORS_H_
