// Distributed evaluation: loss and accuracy of a classifier over a whole dataset, each rank evaluating
// its EvaluationSampler share (every sample exactly once, no padding), combined so that the result
// equals single-process evaluation. Lives above comm/ because it needs both a model and a ProcessGroup.
//
//   DDP_ASSIGN_OR_RETURN(EvalResult r, EvaluateDistributed(*model, *test, group));  // group may be null
#ifndef DDP_DDP_DISTRIBUTED_EVAL_H_
#define DDP_DDP_DISTRIBUTED_EVAL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "data/dataset.h"
#include "nn/module.h"

namespace ddp {

// Loss and accuracy over a dataset.
struct EvalResult {
  double loss = 0.0;      // mean cross-entropy per sample
  double accuracy = 0.0;  // fraction of correct argmax predictions
  double top5_accuracy = 0.0;  // fraction whose label is among the 5 highest logits (fewer than 5 logits
                               // strictly above it; 1 with 5 classes or fewer), as torchvision's acc5
  int64_t count = 0;      // samples evaluated (the whole dataset, over all ranks)
};

// How each rank evaluates its share.
struct DistributedEvalOptions {
  int64_t batch_size = 1000;      // samples per forward pass on each rank
  int num_workers = 0;            // DataLoader worker threads per rank (0: load on the calling thread)
  bool broadcast_buffers = true;  // first copy rank 0's buffers (BatchNorm running statistics, which
                                  // DDP without SyncBatchNorm lets drift apart) to every rank
};

// Evaluates `model` (a classifier: logits [batch, classes] against int64 labels) on every sample of
// `dataset`: each rank forwards its EvaluationSampler share in eval mode without recording a graph
// (the previous training mode is restored), then one all-reduce of (loss sum, correct, top-5, count) combines
// the ranks (Note [Exact metric reduction] in the .cc). Every rank returns the same result, equal to
// single-process evaluation. `group` may be null (one process); otherwise the call is collective and
// every rank must pass a model with the same architecture and the same dataset. Pass the inner module,
// not the DistributedDataParallel wrapper. Errors: the dataset's (naming the sample index) or the
// collective's (naming it and the rank).
absl::StatusOr<EvalResult> EvaluateDistributed(Module& model, const Dataset& dataset, ProcessGroup* group,
                                               const DistributedEvalOptions& options = {});

// Every sample's prediction, on every rank.
struct GatheredPredictions {
  std::vector<int64_t> predicted;  // argmax class of sample i at [i], in dataset order
  std::vector<double> loss;        // cross-entropy of sample i at [i]
  std::vector<uint8_t> in_top5;    // 1 where sample i's label is among its 5 highest logits
  EvalResult result;               // totals over the dataset, summed in dataset order
};

// As EvaluateDistributed, but every rank's per-sample predictions and losses are gathered to every rank
// (one AllGatherObject of bytes) and reassembled in dataset order. Collective when `group` is not null.
absl::StatusOr<GatheredPredictions> GatherPredictions(Module& model, const Dataset& dataset, ProcessGroup* group,
                                                      const DistributedEvalOptions& options = {});

}  // namespace ddp

#endif  // DDP_DDP_DISTRIBUTED_EVAL_H_
