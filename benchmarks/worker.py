"""One measurement in a fresh process: ``python -m benchmarks.worker W1 stm [--quick]``.

Prints one JSON object on its last line of output; ``benchmarks.run`` starts
one of these per system and repetition so no run inherits another's heap,
caches or threads.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

WORKLOADS = {
    "W1": "benchmarks.w1_chat",
    "W2": "benchmarks.w2_upgrades",
    "W3": "benchmarks.w3_restart",
    "W4": "benchmarks.w4_purge",
    "W5": "benchmarks.w5_memory",
    "W6": "benchmarks.w6_server",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("system")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    module = importlib.import_module(WORKLOADS[args.workload])
    if args.system not in module.SYSTEMS:
        parser.error(f"{args.workload} has no system {args.system!r}: {sorted(module.SYSTEMS)}")
    result = module.run(args.system, args.quick)
    stm = sys.modules.get("stm")
    result["stm_from"] = getattr(stm, "__file__", None)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
