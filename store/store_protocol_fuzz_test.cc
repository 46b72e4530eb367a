// Runs the libFuzzer entry point of store/store_protocol_fuzz.cc under gtest, since Bazel here builds
// with gcc (no -fsanitize=fuzzer): ~200k seeded inputs, half purely random and half mutations of
// valid frames (bit flips, truncations, splices, length-field overwrites), within a few seconds.
// For coverage-guided fuzzing with ASan: tools/fuzz_store_protocol.sh.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "store/store_protocol.h"
#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace ddp {
namespace {

std::vector<std::string> SeedFrames() {
  std::vector<std::string> seeds;
  StoreRequest r;
  r.op = StoreOp::kHello;
  r.number = kStoreProtocolVersion;
  r.value = "token";
  seeds.push_back(EncodeRequestFrame(r));
  r = StoreRequest();
  r.op = StoreOp::kSet;
  r.keys = {"key"};
  r.value = "value";
  seeds.push_back(EncodeRequestFrame(r));
  r.op = StoreOp::kCompareSet;
  r.desired = "new";
  seeds.push_back(EncodeRequestFrame(r));
  r = StoreRequest();
  r.op = StoreOp::kWait;
  r.keys = {"a", "bb", "ccc"};
  r.number = 100;
  seeds.push_back(EncodeRequestFrame(r));
  r.op = StoreOp::kGet;
  r.keys = {"a"};
  seeds.push_back(EncodeRequestFrame(r));
  StoreResponse response;
  response.code = absl::StatusCode::kNotFound;
  response.message = "msg";
  response.value = "v";
  seeds.push_back(EncodeResponseFrame(response));
  return seeds;
}

std::string Mutate(std::string s, const std::vector<std::string>& seeds, std::mt19937& rng) {
  const int edits = 1 + rng() % 4;
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 5) {
      case 0:  // Flip a bit.
        if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:  // Truncate.
        s.resize(s.empty() ? 0 : rng() % s.size());
        break;
      case 2:  // Splice another seed in.
        s.insert(s.empty() ? 0 : rng() % s.size(), seeds[rng() % seeds.size()]);
        break;
      case 3:  // Overwrite 4 bytes with an extreme length.
        if (s.size() >= 4) {
          const size_t at = rng() % (s.size() - 3);
          const uint32_t v = (rng() % 2) ? 0xffffffffu : static_cast<uint32_t>(rng() % 512);
          for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
        }
        break;
      default:  // Insert a random byte.
        s.insert(s.begin() + (s.empty() ? 0 : rng() % s.size()), static_cast<char>(rng()));
        break;
    }
  }
  return s;
}

void FuzzOne(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(StoreProtocolFuzzTest, SeededRandomAndMutatedInputsNeverCrash) {
  const std::vector<std::string> seeds = SeedFrames();
  std::mt19937 rng(20240601);
  const absl::Time give_up = absl::Now() + absl::Seconds(15);
  int runs = 0;
  for (const std::string& seed : seeds) {
    FuzzOne(seed);
    FuzzOne(seed.substr(4));
  }
  for (; runs < 200000 && absl::Now() < give_up; ++runs) {
    std::string input;
    if (runs % 2 == 0) {
      input.resize(rng() % 48);
      for (char& c : input) c = static_cast<char>(rng() % 12);  // Small bytes hit valid ops/lengths.
    } else {
      input = Mutate(seeds[rng() % seeds.size()], seeds, rng);
      if (rng() % 2) input = input.substr(std::min<size_t>(4, input.size()));  // Bare payload.
    }
    FuzzOne(input);
  }
  EXPECT_GT(runs, 10000);  // Even on a loaded machine.
}

}  // namespace
}  // namespace ddp
