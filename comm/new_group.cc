#include "comm/new_group.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "comm/process_group_debug.h"
#include "base/check.h"

namespace ddp {
namespace {

// The Gloo options of a subgroup of `context`'s group: the parent's own when it is a Gloo group (under
// a debug wrapper or not), else the timeout of the context and the address InitProcessGroup would pick.
ProcessGroupGlooOptions SubgroupOptions(const DistributedContext& context) {
  ProcessGroup* group = context.group.get();
  if (auto* debug = dynamic_cast<ProcessGroupDebug*>(group)) group = &debug->inner();
  if (auto* gloo = dynamic_cast<ProcessGroupGloo*>(group)) return gloo->options();
  ProcessGroupGlooOptions options;
  options.timeout = context.timeout;
  const char* ifaddr = std::getenv("GLOO_SOCKET_IFADDR");
  options.hostname = ifaddr != nullptr ? ifaddr : LocalAddressToward(context.launch.master_addr);
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> NewGroup(DistributedContext& context, const std::vector<int>& ranks) {
  DDP_CHECK(context.group != nullptr) << "NewGroup needs a joined DistributedContext";
  const int64_t index = context.groups_created++;
  if (context.store == nullptr) {  // backend mpi rendezvouses through MPI itself, without a store
    return absl::UnimplementedError(absl::StrCat("NewGroup: subgroups of a ", context.group->backend_name(),
                                                 " group are not supported (no rendezvous store)"));
  }
  if (!context.group->tensor_device().is_cpu()) {
    return absl::UnimplementedError(absl::StrCat("NewGroup: subgroups of a ", context.group->backend_name(),
                                                 " group are not supported (only of CPU backends)"));
  }
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroupGloo> group,
                       NewGlooSubgroup(*context.store, context.launch.rank, context.launch.world_size, ranks, index,
                                       SubgroupOptions(context)));
  if (group == nullptr) return std::unique_ptr<ProcessGroup>();
  if (dynamic_cast<ProcessGroupDebug*>(context.group.get()) != nullptr) {
    return std::unique_ptr<ProcessGroup>(std::make_unique<ProcessGroupDebug>(std::move(group)));
  }
  return std::unique_ptr<ProcessGroup>(std::move(group));
}

}  // namespace ddp
