#!/usr/bin/env python3
"""Instructions per event of the engine and encoder (bench/engine-driver.swift), counted by
callgrind: unlike time, they do not change with the machine's load. Writes its section of
BENCHMARKS.md ("Instructions per event").

    make bench-instructions
"""
import os, re, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sections import write_section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = "\n## Instructions per event\n"
SIZES = (10_000, 100_000)


def instructions(driver, arguments):
    with tempfile.TemporaryDirectory() as directory:
        out = os.path.join(directory, "callgrind.out")
        run = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, driver] + arguments,
                             capture_output=True, text=True, check=True)
        total = int(re.search(r"Collected : (\d+)", run.stderr).group(1))
        return total, run.stdout.strip()


def main():
    driver = sys.argv[1]
    rows = []
    for n in SIZES:
        setup, _ = instructions(driver, [str(n), "--setup-only"])
        full, report = instructions(driver, [str(n)])
        events = int(report.split()[1])
        rows.append((n, events, setup / n, (full - setup) / events))
        print("N=%d: %d events, %.0f instructions per START, %.0f per event" % rows[-1])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    lines = [
        "Written by `make bench-instructions` (`bench/instructions.py`) on %s, commit `%s`: the engine and the encoder without I/O (`bench/engine-driver.swift`: countdowns of 1–5 s on a manual clock, ticks on, every event encoded as the fan-out encodes it), compiled with whole-module optimization as the release build is, under `valgrind --tool=callgrind`. Instructions do not change with load, so one run each; the per-event figure is the full run's count less a run that only starts the countdowns, divided by the events." % (time.strftime("%Y-%m-%d"), commit),
        "",
        "| N | events | instructions per START | instructions per event (engine + encoder) |",
        "|---|---|---|---|",
    ]
    for n, events, per_start, per_event in rows:
        lines.append("| {:,} | {:,} | {:.0f} | {:.0f} |".format(n, events, per_start, per_event))
    lines.append("")
    write_section(os.path.join(ROOT, "BENCHMARKS.md"), MARK, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
