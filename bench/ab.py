#!/usr/bin/env python3
"""A/B of two countdownd builds on the hot path, alternating within each round (the order
flips every round), so that both see the same machine: CPU per delivered event and `done` /
`tick` p99 at 100,000 countdowns with one subscriber, and `START`s a second from 8 clients with
1 and 32 in flight (`--durability process`). Each figure is printed per round, then as median
(lowest–highest) per build. Uses `bench/run.py`'s own measurements.

    python3 bench/ab.py BEFORE_DIR AFTER_DIR [--rounds 3] [--count 100000]

Each directory holds a `countdownd` (built alike: `swift build -c release` with the same flags).
"""
import argparse
import importlib.util
import json
import os
import shutil
import statistics
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run", os.path.join(HERE, "run.py"))
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=100_000)
    args = parser.parse_args()
    builds = {"before": args.before, "after": args.after}
    run.build_tools()
    figures = {name: [] for name in builds}
    work = tempfile.mkdtemp(prefix="countdownd-ab-")
    try:
        for index in range(args.rounds):
            for name in (["before", "after"] if index % 2 == 0 else ["after", "before"]):
                run.BIN = builds[name]
                lateness = run.countdownd_lateness(work, args.count, 7 + index)
                row = {
                    "cpu_per_event_us": lateness["cpu_per_event_us"],
                    "done_p99_ms": lateness["done"]["p99"],
                    "tick_p99_ms": lateness["tick"]["p99"],
                    "starts_per_s_1": run.countdownd_throughput(work, 1, "process")[0],
                    "starts_per_s_32": run.countdownd_throughput(work, 32, "process")[0],
                }
                figures[name].append(row)
                print("round %d %s %s" % (index + 1, name, json.dumps(row)), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for key in figures["before"][0]:
        cells = []
        for name in builds:
            values = [row[key] for row in figures[name]]
            cells.append("%s %.4g (%.4g–%.4g)" % (name, statistics.median(values), min(values), max(values)))
        print("%s: %s" % (key, "; ".join(cells)))


if __name__ == "__main__":
    main()
