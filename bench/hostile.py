#!/usr/bin/env python3
"""countdownd under attack: what one non-root user can do to root, and what a client that never
reads costs. Needs root (the attacker runs as uid 65534 through setpriv).

    make bench-hostile    # a clean release build, then this script; writes its section of BENCHMARKS.md

Each round starts a fresh release daemon per scenario:
  - **bystander**: root's PING every millisecond (bench/bystander.c) and root's `done` lateness
    (200 countdowns of 1-15 s, one subscriber to their `done`s), while uid 65534 attacks within
    its quotas: 100,000 ticking countdowns of its own and 100 connections that SUBSCRIBE to
    everything and never read; a burst of 75,000 lifecycle events; its whole connection quota.
  - **a never-reading subscriber** to 100,000 ticking countdowns: the daemon's RSS over 60 s.
  - **CPU per delivered event** at N=100,000 (bench/run.py's lateness run), with and without
    100 never-reading subscribers present.
  - **10,000 connections closed at once**: the time until a fresh client's PING is answered.
Every figure: 3 runs, median (lowest-highest).
"""
import os, resource, shutil, socket, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (the benchmark's daemon, tools and helpers)
from run import cell, met  # noqa: E402
from sections import write_section  # noqa: E402

ROOT = run.ROOT
RUNS = 3
MARK = "\n## Under attack\n"
FLOOD = os.path.join(ROOT, "Tests", "Scripts", "flood-as-user.py")
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "python3", FLOOD]
ATTACK_COUNTDOWNS = 100_000
ROOT_COUNTDOWNS = 200
WINDOW_S = 20


def attacker_daemon(directory):
    os.chmod(directory, 0o755)
    return run.Daemon(directory, extra=["--socket-mode", "0666", "--max-countdowns-per-user", str(ATTACK_COUNTDOWNS + 1000)])


def root_done_lateness(sock_path, results):
    """ROOT_COUNTDOWNS countdowns of 1-15 s, started one at a time on one connection while a
    thread reads their `done`s on another (stamping each as it is read); each `done`'s lateness
    against the instant its START was sent (so over-stated by the reply's latency)."""
    names = ["root%d" % i for i in range(ROOT_COUNTDOWNS)]
    follower = socket.socket(socket.AF_UNIX)
    follower.connect(sock_path)
    follower.settimeout(120)  # A lost done ends the reading, not the benchmark.
    events = follower.makefile("rb")
    events.readline()
    follower.sendall(("SUBSCRIBE %s EVENTS done\n" % " ".join(names)).encode())
    events.readline()
    deadlines = {}

    def read():
        while len(results) < ROOT_COUNTDOWNS:
            try:
                line = events.readline().decode()
            except OSError:
                return
            if not line:
                return
            arrived = time.monotonic()
            if line.startswith("EVENT"):
                results.append((arrived - deadlines[line.split()[3]]) * 1000)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    f = s.makefile("rb")
    f.readline()
    for name, duration in zip(names, run.durations_ms(ROOT_COUNTDOWNS, 7, 1000, 15000)):
        deadlines[name] = time.monotonic() + duration / 1000
        s.sendall(("START %s %dms\n" % (name, duration)).encode())
        f.readline()
        time.sleep(WINDOW_S / 2 / ROOT_COUNTDOWNS)
    reader.join(60)
    s.close()
    follower.shutdown(socket.SHUT_RDWR)
    follower.close()


def bystander(workdir, sock_path, attack):
    """Root's PING and `done` figures while `attack()` runs; `attack` returns a stop function."""
    out = os.path.join(workdir, "bystander.txt")
    pinger = subprocess.Popen([os.path.join(run.TOOLS, "bystander"), sock_path, "1000", out], stdout=subprocess.PIPE, text=True)
    if pinger.stdout.readline().strip() != "READY":
        raise RuntimeError("bystander did not connect")
    stop_attack = attack()
    done = []
    worker = threading.Thread(target=root_done_lateness, args=(sock_path, done))
    worker.start()
    worker.join(120)
    pinger.terminate()
    pinger.wait(30)
    stop_attack()
    pings = [int(line) / 1e6 for line in open(out)]
    os.unlink(out)
    return {"ping": run.percentiles(pings), "done": run.percentiles(done), "done_count": len(done)}


def hold(arguments, workdir, what, after=()):
    """Starts a holding flood mode as uid 65534 (its report file, then `after`, follow
    `arguments`); waits for its report; returns a stop function."""
    report = os.path.join(workdir, "report-%s" % what)
    open(report, "w").close()
    os.chmod(report, 0o666)
    process = subprocess.Popen(AS_NOBODY + arguments + [report] + list(after))
    deadline = time.monotonic() + 300
    while not open(report).read().endswith("\n"):
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError("the attacker did not report: %s" % what)
        time.sleep(0.1)

    def stop():
        process.kill()
        process.wait()
    return stop


def scenario_subscribers(workdir):
    directory = run.fresh_dir(workdir, "subscribers")
    daemon = attacker_daemon(directory)
    try:
        subprocess.run(AS_NOBODY + ["countdowns", daemon.socket, str(ATTACK_COUNTDOWNS)], check=True, capture_output=True, timeout=300)
        return bystander(directory, daemon.socket, lambda: hold(["subscribers", daemon.socket, "100"], directory, "subscribers"))
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def scenario_churn(workdir):
    directory = run.fresh_dir(workdir, "churn")
    daemon = attacker_daemon(directory)
    try:
        def attack():
            process = subprocess.Popen(AS_NOBODY + ["churn", daemon.socket, "25000"], stdout=subprocess.DEVNULL)
            return lambda: process.wait(300)
        return bystander(directory, daemon.socket, attack)
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def scenario_prefix_readers(workdir):
    """250 connections of uid 65534 follow the prefix of its own churn and read everything: each
    change it makes is delivered 250 times, by 4 connections pipelining at once."""
    directory = run.fresh_dir(workdir, "prefix")
    daemon = attacker_daemon(directory)
    try:
        def attack():
            stop_readers = hold(["readers", daemon.socket, "250"], directory, "readers", after=["churn"])
            churners = [subprocess.Popen(AS_NOBODY + ["churn", daemon.socket, "5000"], stdout=subprocess.DEVNULL) for _ in range(4)]

            def stop():
                for process in churners:
                    process.wait(300)
                stop_readers()
            return stop
        return bystander(directory, daemon.socket, attack)
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def scenario_connections(workdir):
    directory = run.fresh_dir(workdir, "connections")
    daemon = attacker_daemon(directory)
    try:
        return bystander(directory, daemon.socket, lambda: hold(["connections", daemon.socket], directory, "connections"))
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def never_reader_rss(workdir):
    """One root subscriber to 100,000 ticking countdowns that never reads: RSS growth over 60 s
    after it fell behind, sampled each second."""
    directory = run.fresh_dir(workdir, "rss")
    daemon = run.Daemon(directory)
    try:
        run.pipelined(daemon.socket, ["START n%d 1h\n" % i for i in range(ATTACK_COUNTDOWNS)])
        baseline = daemon.rss_bytes()
        s = socket.socket(socket.AF_UNIX)
        s.connect(daemon.socket)
        s.sendall(b"SUBSCRIBE\n")  # Never read: greeting, OK, snapshots and ticks pile up.
        time.sleep(5)  # It falls behind within the first second; the 60 s are measured after.
        samples = []
        for _ in range(60):
            time.sleep(1)
            samples.append(daemon.rss_bytes() - baseline)
        s.close()
        return {"first": samples[0], "last": samples[-1], "max": max(samples)}
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def cpu_per_event(workdir, never_readers):
    """bench/run.py's lateness run at N=100,000, with `never_readers` root subscribers to
    everything that never read, connected before the countdowns start."""
    held = []
    original = run.start_eventlog

    def with_never_readers(mode, sock_path, out, expected, timeout):
        for _ in range(never_readers):
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock_path)
            s.sendall(b"SUBSCRIBE\n")
            held.append(s)
        return original(mode, sock_path, out, expected, timeout)
    run.start_eventlog = with_never_readers
    try:
        return run.countdownd_lateness(workdir, ATTACK_COUNTDOWNS, 1)
    finally:
        run.start_eventlog = original
        for s in held:
            s.close()


def close_all_at_once(workdir, count=10_000):
    directory = run.fresh_dir(workdir, "close")
    daemon = run.Daemon(directory, extra=["--max-connections", str(count + 100)])
    try:
        sockets = []
        for _ in range(count):
            s = socket.socket(socket.AF_UNIX)
            s.connect(daemon.socket)
            s.recv(256)
            sockets.append(s)
        fresh = socket.socket(socket.AF_UNIX)
        for s in sockets:
            s.close()
        closed = time.monotonic()
        fresh.connect(daemon.socket)
        f = fresh.makefile("rb")
        f.readline()
        fresh.sendall(b"PING\n")
        f.readline()
        served = time.monotonic()
        fresh.close()
        return (served - closed) * 1000
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def main():
    global RUNS, ATTACK_COUNTDOWNS, ROOT_COUNTDOWNS, WINDOW_S
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one run: a smoke test, not a measurement; writes nothing")
    parser.add_argument("--only", choices=["subscribers", "churn", "prefix", "connections"], help="only root beside this attack, 3 runs; writes nothing")
    args = parser.parse_args()
    if args.quick:
        RUNS, ATTACK_COUNTDOWNS, ROOT_COUNTDOWNS, WINDOW_S = 1, 5_000, 20, 4
    if os.getuid() != 0:
        sys.exit("bench/hostile.py needs root: the attacker runs as uid 65534 through setpriv")
    if not os.path.exists(os.path.join(run.BIN, "countdownd")):
        sys.exit("%s/countdownd is not built: make bench-hostile builds it" % run.BIN)
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    run.build_tools()
    workdir = tempfile.mkdtemp(prefix="cd-hostile-")
    os.chmod(workdir, 0o755)
    f = {}
    try:
        for round_index in range(RUNS):
            for name, body in (("subscribers", scenario_subscribers), ("churn", scenario_churn), ("prefix", scenario_prefix_readers), ("connections", scenario_connections)):
                if args.only and name != args.only:
                    continue
                run.log("round %d: root beside %s" % (round_index + 1, name))
                f.setdefault(name, []).append(body(workdir))
                if args.only:
                    r = f[name][-1]
                    print("%s: PING p99 %.2f ms max %.2f ms; done p99 %.2f ms (%d)" % (name, r["ping"]["p99"], r["ping"]["max"], r["done"]["p99"], r["done_count"]), flush=True)
            if args.only:
                continue
            run.log("round %d: a never-reading subscriber's memory" % (round_index + 1))
            f.setdefault("rss", []).append(never_reader_rss(workdir))
            for readers in (0, 100):
                run.log("round %d: CPU per event with %d never-reading subscribers" % (round_index + 1, readers))
                f.setdefault("cpu%d" % readers, []).append(cpu_per_event(workdir, readers)["cpu_per_event_us"])
            f.setdefault("cpu_ratio", []).append(f["cpu100"][-1] / f["cpu0"][-1])
            run.log("round %d: 10,000 connections closed at once" % (round_index + 1))
            f.setdefault("close", []).append(close_all_at_once(workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    if args.only:
        return
    mib = 1 << 20
    lines = [
        "Written by `make bench-hostile` (`bench/hostile.py`) on %s, commit `%s`. uid 65534 attacks within its quotas while root is measured: root's PING every millisecond (`bench/bystander.c`), and %d root countdowns of 1–15 s started over %d s, each `done`'s lateness measured from the instant its START was sent (so it includes the START's own reply time). %d runs; median (lowest–highest)." % (
            time.strftime("%Y-%m-%d"), subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(), ROOT_COUNTDOWNS, WINDOW_S // 2, RUNS),
        "",
        "| figure | target | median (lowest–highest) | met |",
        "|---|---|---|---|",
    ]
    attacks = (
        ("subscribers", "100,000 ticking countdowns and 100 subscribers that never read"),
        ("churn", "75,000 lifecycle events in a burst (START, CANCEL, REMOVE of 25,000)"),
        ("prefix", "250 subscribers to the prefix of its own churn, reading, while 4 connections make 60,000 lifecycle events"),
        ("connections", "its whole connection quota (1,000), held open"),
    )
    for key, label in attacks:
        runs = f[key]
        lines.append("| root's PING p99, beside %s | ≤ 5 ms | %s ms | %s |" % (label, cell([r["ping"]["p99"] for r in runs], "%.2f"), met([r["ping"]["p99"] for r in runs], 5)))
        lines.append("| root's PING max, the same | ≤ 50 ms | %s ms | %s |" % (cell([r["ping"]["max"] for r in runs], "%.2f"), met([r["ping"]["max"] for r in runs], 50)))
        lines.append("| root's `done` lateness p99, the same | ≤ 5 ms | %s ms | %s |" % (cell([r["done"]["p99"] for r in runs], "%.2f"), met([r["done"]["p99"] for r in runs], 5)))
    rss = f["rss"]
    lines.append("| RSS growth of a never-reading subscriber to 100,000 ticking countdowns, over 60 s (max of 60 samples) | ≤ 17 MiB (`--output-limit` + 1 MiB) | %s MiB | %s |" % (cell([r["max"] / mib for r in rss], "%.1f"), met([r["max"] / mib for r in rss], 17)))
    lines.append("| the same, last sample minus first (flat: about 0) | | %s MiB | |" % cell([(r["last"] - r["first"]) / mib for r in rss], "%.2f"))
    lines.append("| CPU per delivered event at 100,000, no never-reading subscriber | ≤ 1 µs | %s µs | %s |" % (cell(f["cpu0"], "%.2f"), met(f["cpu0"], 1)))
    lines.append("| CPU per delivered event at 100,000, 100 never-reading subscribers present | ≤ 1 µs | %s µs | %s |" % (cell(f["cpu100"], "%.2f"), met(f["cpu100"], 1)))
    lines.append("| the same ÷ without them, within each round | | %s× | |" % cell(f["cpu_ratio"], "%.2f"))
    lines.append("| a fresh client's PING answered after 10,000 connections closed at once | ≤ 100 ms | %s ms | %s |" % (cell(f["close"], "%.1f"), met(f["close"], 100)))
    lines.append("")
    lines.append("Reading it: a subscriber that never reads is sent no ticks once 64 KiB behind, and costs nothing per tick from then on; its memory stays at that and the snapshots' slice. Lifecycle events are never dropped, so each of the 100 never-reading subscribers still gets every `started` and `done` (and holds them, up to `--output-limit`, and all of one user's together up to `--output-limit-per-user`): that is the CPU the second CPU row adds. CPU per delivered event counts the whole daemon (engine, fan-out, output queues, `send`); the engine and encoder alone take the instructions in *Instructions per event*.")
    lines.append("")
    if args.quick:
        print("\n".join(lines))
        return
    write_section(os.path.join(ROOT, "BENCHMARKS.md"), MARK, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
