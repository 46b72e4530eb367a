#include "sim/straggler.h"

#include <cmath>

#include "gtest/gtest.h"

namespace ddp {
namespace sim {
namespace {

TEST(StragglerTest, ExpectedMaximaOfStandardNormalsMatchTheTables) {
  EXPECT_EQ(ExpectedMaxOfStandardNormals(1), 0.0);
  EXPECT_NEAR(ExpectedMaxOfStandardNormals(2), 1.0 / std::sqrt(M_PI), 1e-6);
  EXPECT_NEAR(ExpectedMaxOfStandardNormals(3), 1.5 / std::sqrt(M_PI), 1e-6);  // 3 / (2 sqrt(pi)), exact
  // Tabulated expected maxima (order statistics of the normal distribution).
  EXPECT_NEAR(ExpectedMaxOfStandardNormals(4), 1.029375, 1e-5);
  EXPECT_NEAR(ExpectedMaxOfStandardNormals(10), 1.538753, 1e-5);
  EXPECT_NEAR(ExpectedMaxOfStandardNormals(100), 2.507594, 1e-5);
  // Grows like sqrt(2 ln n) and never decreases.
  double previous = 0;
  for (int n : {2, 8, 64, 1024, 16384}) {
    const double e = ExpectedMaxOfStandardNormals(n);
    EXPECT_GT(e, previous) << n;
    EXPECT_LT(e, std::sqrt(2 * std::log(n))) << n;
    previous = e;
  }
}

TEST(StragglerTest, TheDelayScalesWithJitterAndTheSquareRootOfTheCompute) {
  const double e2 = 1.0 / std::sqrt(M_PI);
  EXPECT_NEAR(StragglerDelay(2e-3, 2, 1.0), 2e-3 * e2, 1e-12);
  EXPECT_NEAR(StragglerDelay(2e-3, 2, 0.25), 1e-3 * e2, 1e-12);
  EXPECT_EQ(StragglerDelay(2e-3, 1, 1.0), 0.0);  // one rank waits for nobody
  EXPECT_EQ(StragglerDelay(0.0, 64, 1.0), 0.0);
  EXPECT_NEAR(StragglerDelay(1e-3, 2, 3.0), 1e-3 * e2, 1e-12);  // fractions clamp to [0, 1]
}

}  // namespace
}  // namespace sim
}  // namespace ddp
