# Sourced by the probes in bench/*_probe/run.sh (one-core experiments built with the system compiler,
# outside Bazel). Contract: sets BUILD to a fresh temporary folder that is removed when the script exits,
# and defines print_cpu REGEX, which prints the CPU's model name, family and model number, the
# /proc/cpuinfo flags matching the extended regular expression REGEX, and the UTC date.
BUILD="$(mktemp -d)"
trap 'rm -rf "$BUILD"' EXIT

print_cpu() {
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) (family $(grep -m1 'cpu family' /proc/cpuinfo |
    cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')); flags:" \
    "$(grep -o -E "$1" /proc/cpuinfo | sort -u | tr '\n' ' ')"
  date -u
}
