// The DDP contract under misuse, end to end: examples/train under ddprun (or ranks started by hand)
// with the mistakes users make in their second week must end in a clear error or a correct run, never
// a hang, a crash or silently wrong numbers.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Ddprun(int nproc) {
  return absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=", nproc, " --master_port=0 ",
                      Runfile("examples/train"));
}

// BatchNorm's running statistics differ between forwards under broadcast_buffers (each rank updates
// them from its own batch after the broadcast); the desync check must not call that a desync.
TEST(DdpContractTest, DesyncCheckAcceptsBatchNormStatistics) {
  std::string output;
  EXPECT_EQ(RunShell(Ddprun(2) + " --model=cnn_bn --max_steps=2 --batch_size=16 --check_sync_every=1", &output),
            0)
      << output;
  EXPECT_THAT(output, Not(HasSubstr("out of sync")));
  EXPECT_THAT(output, HasSubstr("final test_acc"));
}

}  // namespace
}  // namespace ddp
