# Sourced by the benchmarks that compare with PyTorch on a chosen data set (bench/compare_train.sh,
# bench/compare_ddp.sh). Contract: reads DATASET (fashion_mnist, the default, or cifar10) and DATA_DIR, and
# sets the array data_flags, which both sides' command lines take: empty for Fashion-MNIST; for cifar10
# --dataset=cifar10 --data_dir=DIR, with DIR a synthetic folder in the binary version's layout
# (tools/synthetic_cifar10.py: random pixels, which a dense model's step time does not depend on) when
# DATA_DIR is unset. Another DATASET exits naming the choices.
DATASET=${DATASET:-fashion_mnist}
data_flags=()
case $DATASET in
  fashion_mnist) ;;
  cifar10)
    if [[ -z ${DATA_DIR:-} ]]; then
      DATA_DIR=$(mktemp -d)
      python3 tools/synthetic_cifar10.py "$DATA_DIR" 5000 1000
    fi
    data_flags=(--dataset=cifar10 --data_dir="$DATA_DIR")
    ;;
  *)
    echo "error: DATASET=$DATASET; the benchmarks take fashion_mnist or cifar10" >&2
    exit 1
    ;;
esac
