#include "tensor/random.h"

#include <cmath>
#include <sstream>

namespace ddp {

float Generator::Uniform(float low, float high) {
  // 24 random bits -> a float in [0, 1) without rounding up to 1.
  const float unit = static_cast<float>(engine_() >> 40) * (1.0f / 16777216.0f);
  return low + (high - low) * unit;
}

float Generator::Normal(float mean, float stddev) {
  // Box-Muller on two uniforms in (0, 1].
  const double u1 = (static_cast<double>(engine_() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0);
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  return mean + stddev * static_cast<float>(z);
}

uint64_t Generator::RandomIndex(uint64_t n) {
  std::uniform_int_distribution<uint64_t> dist(0, n - 1);
  return dist(engine_);
}

std::string Generator::SaveState() const {
  std::ostringstream out;
  out << engine_;
  return out.str();
}

absl::Status Generator::LoadState(const std::string& state) {
  std::istringstream in(state);
  std::mt19937_64 engine;
  in >> engine;
  if (in.fail()) return absl::InvalidArgumentError("malformed random generator state");
  engine_ = engine;
  return absl::OkStatus();
}

}  // namespace ddp
