# shellcheck shell=bash disable=SC2034
# Sourced by the A/B scripts of bench/ (environment_ab.sh, gradient_ab.sh): reads their first two arguments,
# VARIABLE and "A B", into $variable, $value_a and $value_b; prints the usage line given as the first
# argument and exits 2 when either is missing.
#   source bench/ab_values.sh "bash bench/X.sh VARIABLE \"A B\" [...]" "$@"
usage=$1
shift
if [ $# -lt 2 ]; then
  echo "usage: $usage" >&2
  exit 2
fi
variable=$1
read -r value_a value_b <<< "$2"
if [ -z "${value_b:-}" ]; then
  echo "expected two values in \"$2\": $usage" >&2
  exit 2
fi
