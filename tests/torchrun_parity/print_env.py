# Prints every variable a launcher sets for its workers (those not in the launcher's own environment,
# which the test passes in PARITY_BASE_ENV), one "OUT <rank> NAME=value" line each.
import json
import os

base = set(json.loads(os.environ.get("PARITY_BASE_ENV", "[]")))
rank = os.environ.get("RANK", "?")
for name in sorted(os.environ):
    if name not in base and name != "PARITY_BASE_ENV":
        print(f"OUT {rank} {name}={os.environ[name]}", flush=True)
