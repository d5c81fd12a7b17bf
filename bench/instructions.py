#!/usr/bin/env python3
"""Instructions per event, counted by callgrind: of the engine and encoder alone
(bench/engine-driver.swift), which do not change with the machine's load, and of the real
release daemon, started on a temporary socket (per START, then per delivered event with one
subscriber). Writes its section of
BENCHMARKS.md ("Instructions per event").

    make bench-instructions
"""
import os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

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


class CallgrindDaemon:
    """The release daemon under callgrind on a temporary socket, its instrumentation off until
    asked for (`control`); every thread is counted, system calls are not instructions of the
    process."""

    def __init__(self, binary, work):
        self.work = work
        self.socket, self.out = os.path.join(work, "socket"), os.path.join(work, "callgrind.out")
        os.mkdir(os.path.join(work, "state"))
        self.log = os.path.join(work, "valgrind.log")
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + self.out,
                 binary, "--socket", self.socket, "--state-dir", os.path.join(work, "state"), "--log-level", "warning"],
                stdout=subprocess.DEVNULL, stderr=log)

    def fail(self, message):
        tail = open(self.log).read()[-2000:]
        raise SystemExit("%s\nvalgrind's log ends:\n%s" % (message, tail))

    def control(self, *flags):
        """`callgrind_control` on the daemon: `-i on` starts counting, `-d` dumps the count so far
        (to callgrind.out.1, .2, …) and starts again from 0."""
        run = subprocess.run(["callgrind_control"] + list(flags) + [str(self.process.pid)], capture_output=True, text=True)
        if run.returncode != 0:
            self.fail("callgrind_control %s failed: %s" % (" ".join(flags), run.stdout + run.stderr))

    def dump_total(self, number):
        self.control("-d")
        return callgrind_total("%s.%d" % (self.out, number))

    def connect(self):
        """A client, past the daemon's greeting, as a file of lines."""
        deadline = time.monotonic() + 120  # valgrind's start-up takes seconds
        while True:
            if self.process.poll() is not None:
                self.fail("the daemon under valgrind exited with %d" % self.process.returncode)
            conn = socket.socket(socket.AF_UNIX)
            try:
                conn.connect(self.socket)
                break
            except OSError:
                conn.close()
                if time.monotonic() > deadline:
                    self.fail("the daemon under valgrind never listened on " + self.socket)
                time.sleep(0.1)
        lines = conn.makefile("rwb")
        lines.readline()
        return lines

    def start(self, client, n, how):
        """`n` STARTs pipelined on `client` (`START instructions<i> <how>`), every one answered `OK`."""
        client.write(b"".join(b"START instructions%d %s\n" % (i, how) for i in range(n)))
        client.flush()
        for _ in range(n):
            reply = client.readline()
            if not reply.startswith(b"OK"):
                self.fail("START answered %r" % reply)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise SystemExit("the daemon under valgrind did not stop on SIGTERM; killed")


def daemon_per_start(binary, n):
    """Instructions per START: `n` STARTs of an hour pipelined on one connection, counted from the
    first to the last reply, with nobody subscribed (so nothing ticks, and nothing falls due)."""
    with tempfile.TemporaryDirectory(prefix="cd-instructions-") as work:
        daemon = CallgrindDaemon(binary, work)
        try:
            client = daemon.connect()
            daemon.control("-i", "on")
            daemon.start(client, n, b"3600")
            return daemon.dump_total(1) / n
        finally:
            daemon.stop()


def daemon_per_event(binary, n):
    """Instructions per delivered event: one subscriber to everything and `n` countdowns to one
    wall-clock instant about 7 s away (`START … AT`, not counted), so that all `n` tick together
    at each whole second before it and finish together: a wake-up's worth of events is the same
    whatever the machine's speed. The first second's ticks are let pass (counting may begin in the
    middle of them); from then on every `tick` and `done` to the last is counted.
    Returns (events counted, instructions per event)."""
    with tempfile.TemporaryDirectory(prefix="cd-instructions-") as work:
        daemon = CallgrindDaemon(binary, work)
        try:
            client, subscriber = daemon.connect(), daemon.connect()
            subscriber.write(b"SUBSCRIBE EVENTS tick,done\n")
            subscriber.flush()
            reply = subscriber.readline()
            if not reply.startswith(b"OK subscribed"):
                daemon.fail("SUBSCRIBE answered %r" % reply)
            daemon.start(client, n, b"AT %d" % (int(time.time() * 1000) + 6950))
            daemon.control("-i", "on")
            first = None
            seen = counted = done = 0
            while done < n:
                line = subscriber.readline()
                if not line:
                    daemon.fail("the daemon closed the subscriber")
                _, _, kind, _, remaining, _ = line.split(b" ", 5)
                if first is None:
                    first = remaining
                if remaining == first and kind == b"tick":
                    seen += 1
                    if seen == n:
                        daemon.control("-d")  # the first second's ticks: not counted
                    continue
                if seen < n:
                    daemon.fail("a tick of %s ms left came before the %d of %s ms had" % (remaining.decode(), n, first.decode()))
                counted += 1
                done += kind == b"done"
            if counted % n != 0:
                daemon.fail("%d events counted: not whole seconds of %d countdowns" % (counted, n))
            return counted, daemon.dump_total(2) / counted
        finally:
            daemon.stop()


def main():
    driver, daemon = sys.argv[1], sys.argv[2]
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit("%s is not installed: install valgrind (as root, `apt-get install valgrind`, or run `make bench-instructions` as root)" % tool)
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
    runs = [(daemon_per_start(daemon, DAEMON_N),) + daemon_per_event(daemon, DAEMON_N) for _ in range(DAEMON_RUNS)]
    for per_start, events, per_event in runs:
        print("daemon: %.0f instructions per START, %d events, %.0f per event" % (per_start, events, per_event))
    spread = lambda values: "{:,.0f} ({:,.0f}–{:,.0f})".format(statistics.median(values), min(values), max(values))
    lines += [
        "",
        "The real daemon (the release build, `%s`), under callgrind, counting only while it serves. Per START: %s STARTs of an hour pipelined on one connection, nobody subscribed. Per delivered event: the same number to one wall-clock instant about 7 s away (`START … AT`), with one subscriber, so that all of them tick together each second and finish together whatever the machine's speed; every `tick` and `done` after the first second's, counted. Every thread's user-space instructions count (the snapshot the `done`s bring on too), system calls do not. A wake-up here serves a whole second's events of all of them, more than the benchmark's (about 28 at 100,000): the per-batch costs are spread thinner. %d runs; median (lowest–highest)." % (os.path.relpath(daemon, ROOT), "{:,}".format(DAEMON_N), DAEMON_RUNS),
        "",
        "| N | ticks and `done`s counted | instructions per START | instructions per delivered event |",
        "|---|---|---|---|",
        "| {:,} | {:,} | {} | {} |".format(DAEMON_N, statistics.median(r[1] for r in runs), spread([r[0] for r in runs]), spread([r[2] for r in runs])),
        "",
    ]
    write_section(os.path.join(ROOT, "BENCHMARKS.md"), MARK, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
