// NewGroup: a process group over a subset of a job's ranks (torch.distributed.new_group), so that part
// of the job can run DDP or collectives among themselves while the other ranks do something else.
#ifndef DDP_COMM_NEW_GROUP_H_
#define DDP_COMM_NEW_GROUP_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/gloo/gloo_subgroup.h"
#include "comm/init.h"
#include "comm/process_group.h"

namespace ddp {

// Every rank of `context`'s group calls it, in the same order, with the same `ranks` (PyTorch's
// new_group). The ranks listed get a new group of size ranks.size() in which their rank is their
// position in `ranks`; the others get nullptr ("not a member": PyTorch's GroupMember.NON_GROUP_MEMBER).
// The subgroup is a Gloo group whatever the CPU backend of the parent (kUnimplemented for nccl)
// with the parent's timeout and Gloo options, rendezvousing under its own store prefix
// "subgroup_<n>" (n = context.groups_created, which every call increments, members or not), and wrapped
// in ProcessGroupDebug when the parent is (DDP_DEBUG=detail). Errors: kInvalidArgument naming the list
// when a rank is out of range or repeated or the list is empty; the subgroup's rendezvous errors
// (naming the subgroup's ranks that never joined) otherwise. Blocks members until every member joined
// (bounded by the timeout); non-members return at once. The subgroup does not own `context`, which must
// outlive it (its store lives there). Not thread-safe with respect to other NewGroup calls on `context`.
absl::StatusOr<std::unique_ptr<ProcessGroup>> NewGroup(DistributedContext& context, const std::vector<int>& ranks);

}  // namespace ddp

#endif  // DDP_COMM_NEW_GROUP_H_
