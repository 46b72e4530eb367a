"""Writes a CIFAR-10 folder in the binary version's layout (data/cifar.h) with random pixels and labels,
for benchmarks that need CIFAR-10's shapes (3x32x32, 10 classes) where the real data set is not at hand:
the step time of a dense model does not depend on the pixel values. Not for accuracy.

    python3 tools/synthetic_cifar10.py OUT_DIR [TRAIN_RECORDS (50000)] [TEST_RECORDS (10000)]
"""
import os
import random
import sys


def write_split(path, records, rng):
    with open(path, "wb") as f:
        for _ in range(records):
            f.write(bytes([rng.randrange(10)]) + rng.randbytes(3072))


def main():
    out = sys.argv[1]
    train = int(sys.argv[2]) if len(sys.argv) > 2 else 50000
    test = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    os.makedirs(out, exist_ok=True)
    rng = random.Random(0)
    for i in range(5):
        write_split(os.path.join(out, "data_batch_%d.bin" % (i + 1)), train // 5, rng)
    write_split(os.path.join(out, "test_batch.bin"), test, rng)
    print("wrote a synthetic CIFAR-10 (%d training, %d test records) to %s" % (train // 5 * 5, test, out))


if __name__ == "__main__":
    main()
