#include "train/batch_source.h"

#include "base/check.h"

namespace ddp {

LoaderBatches::LoaderBatches(DataLoader& loader)
    : loader_(loader), sampler_(dynamic_cast<const DistributedSampler*>(loader.sampler())) {
  DDP_CHECK(sampler_ != nullptr) << "train/train's loader uses a DistributedSampler";
}

}  // namespace ddp
