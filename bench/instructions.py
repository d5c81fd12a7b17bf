#!/usr/bin/env python3
"""Instructions per event, counted by callgrind: of the engine and encoder alone
(bench/engine-driver.swift), which do not change with the machine's load, and of the real
release daemon, started on a temporary socket with one subscriber. Writes its section of
BENCHMARKS.md ("Instructions per event").

    make bench-instructions
"""
import os, re, signal, socket, statistics, subprocess, sys, tempfile, time

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


DAEMON_N = 2000
DAEMON_RUNS = 3


def callgrind_total(path):
    for line in open(path):
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit("callgrind wrote no totals to " + path)


def daemon_instructions(binary, n):
    """The release daemon under callgrind, instrumented only while it serves: `n` pipelined STARTs
    of 2-6 s (the first dump: per START, with its `started` line to the subscriber), then every
    tick and `done` until the last (the second dump: per event). Every thread is counted (the
    snapshot that the `done`s bring on too); system calls are not instructions of the process.
    Returns (instructions per START, events after the STARTs, instructions per event)."""
    with tempfile.TemporaryDirectory(prefix="cd-instructions-") as work:
        sock, state, out = os.path.join(work, "socket"), os.path.join(work, "state"), os.path.join(work, "callgrind.out")
        os.mkdir(state)
        log = open(os.path.join(work, "valgrind.log"), "w")
        daemon = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out,
                                   binary, "--socket", sock, "--state-dir", state, "--log-level", "warning"],
                                  stdout=subprocess.DEVNULL, stderr=log)
        control = lambda *flags: subprocess.run(["callgrind_control"] + list(flags) + [str(daemon.pid)], check=True, capture_output=True)
        try:
            client = connect(sock, daemon)
            subscriber = connect(sock, daemon)
            subscriber.write(b"SUBSCRIBE\n"); subscriber.flush()
            reply = subscriber.readline()
            if not reply.startswith(b"OK subscribed"):
                raise SystemExit("SUBSCRIBE answered %r" % reply)
            control("-i", "on")
            # Every first tick is a second after its START: all of them are answered well before.
            client.write(b"".join(b"START instructions%d %d\n" % (i, 2 + i % 5) for i in range(n))); client.flush()
            for _ in range(n):
                reply = client.readline()
                if not reply.startswith(b"OK"):
                    raise SystemExit("START answered %r" % reply)
            control("-d")
            events = done = 0
            while done < n:
                line = subscriber.readline()
                if not line:
                    raise SystemExit("the daemon closed the subscriber")
                events += 1
                done += b" done " in line
            control("-d")
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait()
        # The subscriber's lines after the STARTs' dump: every tick and done, less the started ones.
        after = events - n
        return callgrind_total(out + ".1") / n, after, callgrind_total(out + ".2") / after


def connect(path, daemon):
    """A client of the daemon at `path`, past its greeting, as a file of lines."""
    deadline = time.monotonic() + 120  # valgrind's start-up takes seconds
    while True:
        if daemon.poll() is not None:
            raise SystemExit("the daemon under valgrind exited with %d" % daemon.returncode)
        try:
            conn = socket.socket(socket.AF_UNIX)
            conn.connect(path)
            break
        except OSError:
            conn.close()
            if time.monotonic() > deadline:
                raise SystemExit("the daemon under valgrind never listened on " + path)
            time.sleep(0.1)
    lines = conn.makefile("rwb")
    lines.readline()
    return lines


def main():
    driver, daemon = sys.argv[1], sys.argv[2]
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
    runs = [daemon_instructions(daemon, DAEMON_N) for _ in range(DAEMON_RUNS)]
    for per_start, events, per_event in runs:
        print("daemon: %.0f instructions per START, %d events, %.0f per event" % (per_start, events, per_event))
    spread = lambda values: "{:,.0f} ({:,.0f}–{:,.0f})".format(statistics.median(values), min(values), max(values))
    lines += [
        "",
        "The real daemon (the release build, `%s`), under callgrind, instrumented only while it serves: %s STARTs of 2–6 s pipelined on one connection, with one subscriber to everything, then every tick and `done` until the last. Every thread's user-space instructions count (the snapshot the `done`s bring on too), system calls do not. The daemon runs about fifty times slower under callgrind, so its batches are those of a lighter load than the benchmark's (about 5 events a wake-up here, 28 at 100,000): per-batch costs weigh more. %d runs; median (lowest–highest)." % (os.path.relpath(daemon, ROOT), "{:,}".format(DAEMON_N), DAEMON_RUNS),
        "",
        "| N | events after the STARTs | instructions per START (with its `started` line) | instructions per delivered event |",
        "|---|---|---|---|",
        "| {:,} | {:,} | {} | {} |".format(DAEMON_N, statistics.median(r[1] for r in runs), spread([r[0] for r in runs]), spread([r[2] for r in runs])),
        "",
    ]
    write_section(os.path.join(ROOT, "BENCHMARKS.md"), MARK, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
