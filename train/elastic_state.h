// The training state one rank of a regrouped elastic group hands to the others (Note [Elastic step
// boundary] in train/elastic_loop.cc): parameters, buffers, optimizer state, the optimizer step count and
// the sampler's position, in one safetensors message.
#ifndef DDP_TRAIN_ELASTIC_STATE_H_
#define DDP_TRAIN_ELASTIC_STATE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "data/sampler.h"
#include "nn/module.h"
#include "nn/optimizer.h"

namespace ddp {

// What a rank continues from: the module and optimizer (not owned) and the counters beside them.
struct ElasticTrainingState {
  Module* model = nullptr;
  Optimizer* optimizer = nullptr;
  int64_t global_step = 0;  // optimizer steps completed
  SamplerState position;    // where the epoch's global order stands after those steps
  // DDP's rebuilt bucket order (Reducer::RebuiltOrderText; "" for none), which the next DDP restores as
  // a resume from a checkpoint does: the order fixes how a ring all-reduce sums, hence the bits.
  std::string bucket_order;
};

// The state as bytes: safetensors with tensors "model.<name>" (Module::StateDict) and "optimizer.<key>"
// (Optimizer::StateDict), and the counters in the metadata.
absl::StatusOr<std::string> EncodeElasticState(const ElasticTrainingState& state);

// Loads bytes from EncodeElasticState into `state` (model and optimizer in place, counters replaced).
// Errors name what did not fit (a missing or misshapen tensor, a malformed counter); `source` names the
// sender in them.
absl::Status DecodeElasticState(const std::string& bytes, const std::string& source, ElasticTrainingState& state);

// Collective over `group`: every rank ends with rank `root`'s state (root's own is left as it is).
// Errors: the group's, or a decoding error naming root.
absl::Status BroadcastElasticState(ProcessGroup& group, int root, ElasticTrainingState& state);

}  // namespace ddp

#endif  // DDP_TRAIN_ELASTIC_STATE_H_
