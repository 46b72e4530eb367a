#!/usr/bin/env python3
"""How far two gradient dumps (train's --dump_grads, float32 safetensors) lie apart, tensor by tensor.

    python3 bench/gradient_diff.py A.safetensors B.safetensors

Prints, for each tensor of A with at least two dimensions: its shape, the relative difference
||B - A|| / ||A||, and which slice along the first dimension (a layer's output channel) holds the largest
share of ||B - A||^2, with that share. A difference concentrated in one output channel points to a discrete
event there (such as a ReLU input that rounding moved across zero); one spread over the channels, to rounding.
Standard library only; exits 2 naming the file on a file that is not a float32 safetensors dump, and on
tensors whose names or shapes disagree.
"""
import array
import json
import math
import struct
import sys


def fail(message):
    """Prints message to stderr and exits with status 2."""
    print(message, file=sys.stderr)
    sys.exit(2)


def load(path):
    """{name: (shape, array of float32)} from a safetensors file of float32 tensors."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        (header_size,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + header_size])
    except (OSError, struct.error, ValueError) as e:
        fail(f"gradient_diff.py: cannot read {path} as safetensors: {e}")
    body = data[8 + header_size:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry.get("dtype") != "F32":
            fail(f"gradient_diff.py: {path}: tensor {name} is {entry.get('dtype')}, expected F32")
        begin, end = entry["data_offsets"]
        if end > len(body) or end - begin != 4 * math.prod(entry["shape"]):
            fail(f"gradient_diff.py: {path}: tensor {name} lies outside the file or disagrees with its shape")
        values = array.array("f")
        values.frombytes(body[begin:end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (tuple(entry["shape"]), values)
    return tensors


def compare(name, shape, a, b):
    """One line: shape, relative difference, the output channel with the largest share of it."""
    rows = shape[0]
    per_row = len(a) // rows
    row_error = [0.0] * rows
    reference = 0.0
    for i, (x, y) in enumerate(zip(a, b)):
        reference += x * x
        row_error[i // per_row] += (y - x) * (y - x)
    total = sum(row_error)
    worst = max(range(rows), key=row_error.__getitem__)
    relative = math.sqrt(total / reference) if reference > 0 else float("nan")
    share = row_error[worst] / total if total > 0 else 0.0
    return f"{name:32s} {str(list(shape)):18s} {relative:9.2e}   channel {worst:4d} {share:6.1%}"


def main():
    if len(sys.argv) != 3:
        fail("usage: python3 bench/gradient_diff.py A.safetensors B.safetensors")
    first, second = load(sys.argv[1]), load(sys.argv[2])
    print(f"{'tensor':32s} {'shape':18s} {'||B-A||/||A||':>13s} largest share of ||B-A||^2")
    for name, (shape, a) in first.items():
        if name not in second or second[name][0] != shape:
            fail(f"gradient_diff.py: {name} {list(shape)} of {sys.argv[1]} is not in {sys.argv[2]} "
                     "with that shape")
        if len(shape) >= 2:
            print(compare(name, shape, a, second[name][1]))


if __name__ == "__main__":
    main()
