#!/usr/bin/env python3
"""What linking the Swift runtime statically costs or saves: the release build as packaged
(--static-swift-stdlib) against the same sources linked to the toolchain's shared libraries.

    make bench-linking    # both builds, then this script; writes the section of BENCHMARKS.md

Figures: binary size (stripped), and the shared libraries the dynamic one loads; launch to
READY=1 on an empty state directory, and with 100,000 countdowns to restore from a clean stop;
START throughput (bench/loadgen.c, 8 clients, pipeline 1 and 32). Every figure: 3 runs, the
builds alternating within each round; median (lowest-highest) of the runs, and the ratio
static / dynamic within each round.
"""
import os, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (the benchmark's daemon, tools and helpers)
from sections import write_section  # noqa: E402

ROOT = run.ROOT
STATIC = os.path.join(ROOT, ".build", "release")
DYNAMIC = os.path.join(ROOT, ".build", "dynamic", "release")
RUNS = 3
LAUNCHES = 10
RESTORE_N = 100_000
MARK = "\n## Static and dynamic linking\n"


def stripped_size(path, workdir):
    copy = os.path.join(workdir, os.path.basename(path) + ".stripped")
    subprocess.run(["strip", "-o", copy, path], check=True)
    size = os.path.getsize(copy)
    os.unlink(copy)
    return size


def toolchain_libraries(path):
    """The shared libraries from outside /lib and /usr/lib that `path` loads, and their size."""
    libraries = []
    for line in subprocess.run(["ldd", path], capture_output=True, text=True).stdout.splitlines():
        parts = line.split("=>")
        if len(parts) == 2 and parts[1].strip().startswith("/") and not parts[1].strip().startswith(("/lib", "/usr/lib")):
            libraries.append(parts[1].split()[0])
    return libraries, sum(os.path.getsize(os.path.realpath(lib)) for lib in libraries)


def with_build(directory, body):
    saved = run.BIN
    run.BIN = directory
    try:
        return body()
    finally:
        run.BIN = saved


def launch_median(workdir):
    """Median launch to READY of LAUNCHES daemons on empty state directories, in ms."""
    times = []
    for index in range(LAUNCHES):
        directory = run.fresh_dir(workdir, "launch%d" % index)
        daemon = run.Daemon(directory)
        times.append(daemon.ready_after * 1000)
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return statistics.median(times)


def restore_state(workdir):
    """A state directory with RESTORE_N countdowns, written by a clean stop (a snapshot)."""
    directory = run.fresh_dir(workdir, "restore-source")
    daemon = run.Daemon(directory)
    run.pipelined(daemon.socket, ["START r%d 1h\n" % i for i in range(RESTORE_N)])
    daemon.stop()
    return daemon.state


def restore_ms(workdir, state):
    directory = run.fresh_dir(workdir, "restore")
    copy = os.path.join(directory, "state")
    shutil.copytree(state, copy)
    daemon = run.Daemon(directory, state=copy)
    ms = daemon.ready_after * 1000
    daemon.stop()
    shutil.rmtree(directory, ignore_errors=True)
    return ms


def cell(values, fmt):
    return (fmt + " (" + fmt + "–" + fmt + ")") % (statistics.median(values), min(values), max(values))


def main():
    for directory in (STATIC, DYNAMIC):
        if not os.path.exists(os.path.join(directory, "countdownd")):
            sys.exit("%s/countdownd is not built: make bench-linking builds both" % directory)
    run.build_tools()
    workdir = tempfile.mkdtemp(prefix="cd-linking-")
    figures = {"static": {}, "dynamic": {}}
    ratios = {}
    try:
        state = with_build(STATIC, lambda: restore_state(workdir))
        for round_index in range(RUNS):
            for name, directory in (("static", STATIC), ("dynamic", DYNAMIC)):
                run.log("round %d, %s" % (round_index + 1, name))
                f = figures[name]
                f.setdefault("launch", []).append(with_build(directory, lambda: launch_median(workdir)))
                f.setdefault("restore", []).append(with_build(directory, lambda: restore_ms(workdir, state)))
                for depth in (1, 32):
                    rate, _errors = with_build(directory, lambda: run.countdownd_throughput(workdir, depth, "process"))
                    f.setdefault("start%d" % depth, []).append(rate)
            for key in figures["static"]:
                ratios.setdefault(key, []).append(figures["static"][key][-1] / figures["dynamic"][key][-1])
        sizes = {name: {binary: stripped_size(os.path.join(directory, binary), workdir) for binary in ("countdownd", "cdctl")}
                 for name, directory in (("static", STATIC), ("dynamic", DYNAMIC))}
        libraries, library_bytes = toolchain_libraries(os.path.join(DYNAMIC, "countdownd"))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    mb = lambda b: "%.1f MB" % (b / 1e6)
    lines = [
        MARK.strip(),
        "",
        "Written by `make bench-linking` (`bench/linking.py`) on %s, commit `%s`. The release build as packaged (`--static-swift-stdlib`) against the same sources linked to the toolchain's shared libraries (`swift build -c release`). %d runs, the builds alternating within each round; median (lowest–highest), and static ÷ dynamic within each round." % (
            time.strftime("%Y-%m-%d"), subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(), RUNS),
        "",
        "| figure | static | dynamic | static ÷ dynamic |",
        "|---|---|---|---|",
        "| countdownd, stripped | %s | %s (+ %s of %d toolchain libraries) | |" % (mb(sizes["static"]["countdownd"]), mb(sizes["dynamic"]["countdownd"]), mb(library_bytes), len(libraries)),
        "| cdctl, stripped | %s | %s | |" % (mb(sizes["static"]["cdctl"]), mb(sizes["dynamic"]["cdctl"])),
        "| launch to READY, empty state (ms, median of %d launches) | %s | %s | %s× |" % (LAUNCHES, cell(figures["static"]["launch"], "%.1f"), cell(figures["dynamic"]["launch"], "%.1f"), cell(ratios["launch"], "%.2f")),
        "| launch to READY, %s countdowns from a snapshot (ms) | %s | %s | %s× |" % ("{:,}".format(RESTORE_N), cell(figures["static"]["restore"], "%.0f"), cell(figures["dynamic"]["restore"], "%.0f"), cell(ratios["restore"], "%.2f")),
        "| START/s, 8 clients, unpipelined | %s | %s | %s× |" % (cell(figures["static"]["start1"], "%.0f"), cell(figures["dynamic"]["start1"], "%.0f"), cell(ratios["start1"], "%.2f")),
        "| START/s, 8 clients, pipeline 32 | %s | %s | %s× |" % (cell(figures["static"]["start32"], "%.0f"), cell(figures["dynamic"]["start32"], "%.0f"), cell(ratios["start32"], "%.2f")),
        "",
    ]
    # Its own section only: the sections after it (hostile.py's, instructions.py's) stay.
    write_section(os.path.join(ROOT, "BENCHMARKS.md"), MARK, lines[2:])
    print("\n".join(lines))


if __name__ == "__main__":
    main()
