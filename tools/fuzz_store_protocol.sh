#!/usr/bin/env bash
# Coverage-guided fuzzing of the TCP store protocol decoders (store/store_protocol_fuzz.cc) with
# clang's libFuzzer and AddressSanitizer, outside Bazel (Bazel here builds with gcc).
# Needs clang 14 and libFuzzer: `apt-get install clang-14 libclang-rt-14-dev`.
# Usage: tools/fuzz_store_protocol.sh [SECONDS=60] [extra libFuzzer flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
out="${FUZZ_OUT:-/tmp/ddp_fuzz_store_protocol}"
mkdir -p "$out/corpus"
CXX="${CXX:-clang++-14}"
command -v "$CXX" >/dev/null || CXX=clang++
"$CXX" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -I. \
  store/store_protocol_fuzz.cc store/store_protocol.cc store/byte_codec.cc base/check.cc \
  $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format absl_time) \
  -o "$out/store_protocol_fuzz"
echo "fuzzing for ${seconds}s; corpus in $out/corpus"
"$out/store_protocol_fuzz" -max_total_time="$seconds" -max_len=4096 "$@" "$out/corpus"
