#!/usr/bin/env python3
"""countdownd under attack: what one non-root user can do to root, and what a client that never
reads costs. Needs root (the attacker runs as uid 65534 through setpriv).

    make bench-hostile    # a clean release build, then this script; writes its section of BENCHMARKS.md

Each round starts a fresh release daemon per scenario:
  - **bystander**: root's PING every millisecond (bench/bystander.c) and root's `done` lateness
    (200 countdowns of 1-15 s, one subscriber to their `done`s), while uid 65534 attacks within
    its quotas (issue 35's rows): 100,000 ticking countdowns of its own and 100 connections that
    SUBSCRIBE to everything and never read, joining while root is measured; a burst of 75,000
    lifecycle events; 250 prefix subscribers beside its churn; its whole connection quota; 50
    connections each subscribed to 10,000 of its names by name, never reading; 400 never-reading
    lifecycle subscribers beside a storm of START ... REPLACE (RSS at the peak). For each, the
    daemon's RSS once every connection of the attacker is gone, against before.
  - **a never-reading subscriber** to 100,000 ticking countdowns: the daemon's RSS over 60 s.
  - **CPU per delivered event** at N=100,000 (bench/run.py's lateness run), with and without
    100 never-reading subscribers present.
  - **10,000 connections closed at once**: the time until a fresh client's PING is answered.
  - **what a user's numbers tell**: uid 65534's seq, replay history and kept_after= read before
    and after 12 changes of root and uid 12345; how many lines moved (0: nothing).
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
NAMED = 10_000
REPLACES = 50_000
RELEASE_WAIT_S = 2


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


def connections_back_to(sock_path, count, timeout=120):
    """Waits until the daemon counts `count` connections (its STATS connection included)."""
    deadline = time.monotonic() + timeout
    while int(run.stats(sock_path)["connections"]) != count:
        if time.monotonic() > deadline:
            raise RuntimeError("the attacker's connections were not all closed in %d s" % timeout)
        time.sleep(0.05)


def bystander(workdir, daemon, attack):
    """Root's PING and `done` figures while `attack()` runs (`attack` returns a stop function);
    and the daemon's RSS before the attack and once every connection of it is gone."""
    sock_path = daemon.socket
    connections_before = int(run.stats(sock_path)["connections"])
    rss_before = daemon.rss_bytes()
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
    extra = stop_attack() or {}
    connections_back_to(sock_path, connections_before)
    # What the attacker's connections held is freed as they close; the daemon gives freed
    # memory back to the system at most once a second after that (ClientTable.noteDropped).
    time.sleep(RELEASE_WAIT_S)
    pings = [int(line) / 1e6 for line in open(out)]
    os.unlink(out)
    result = {"ping": run.percentiles(pings), "done": run.percentiles(done), "done_count": len(done), "rss_left": daemon.rss_bytes() - rss_before}
    result.update(extra)
    return result


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


def as_nobody(arguments, timeout=300):
    """Runs a flood mode as uid 65534 to its end; its output."""
    return subprocess.run(AS_NOBODY + arguments, check=True, capture_output=True, text=True, timeout=timeout).stdout


def scenario_subscribers(workdir):
    directory = run.fresh_dir(workdir, "subscribers")
    daemon = attacker_daemon(directory)
    try:
        subprocess.run(AS_NOBODY + ["countdowns", daemon.socket, str(ATTACK_COUNTDOWNS)], check=True, capture_output=True, timeout=300)
        return bystander(directory, daemon, lambda: hold(["subscribers", daemon.socket, "100"], directory, "subscribers"))
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def scenario_churn(workdir):
    directory = run.fresh_dir(workdir, "churn")
    daemon = attacker_daemon(directory)
    try:
        def attack():
            process = subprocess.Popen(AS_NOBODY + ["churn", daemon.socket, "25000"], stdout=subprocess.DEVNULL)
            return lambda: process.wait(300) and None
        return bystander(directory, daemon, attack)
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
        return bystander(directory, daemon, attack)
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def scenario_connections(workdir):
    directory = run.fresh_dir(workdir, "connections")
    daemon = attacker_daemon(directory)
    try:
        return bystander(directory, daemon, lambda: hold(["connections", daemon.socket], directory, "connections"))
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def scenario_named(workdir):
    """Issue 35's first row: 50 connections of uid 65534, each SUBSCRIBE to 10,000 of its own
    (ticking) names by name, in lines of 300, never reading. Its 10,000 countdowns are started
    before the baseline, so what is measured after it leaves is the subscriptions' memory."""
    directory = run.fresh_dir(workdir, "named")
    daemon = attacker_daemon(directory)
    try:
        hold(["namesubscribers", daemon.socket, "0", str(NAMED)], directory, "named-setup")()
        return bystander(directory, daemon, lambda: hold(["namesubscribers", daemon.socket, "50", str(NAMED)], directory, "named"))
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def scenario_replace_storm(workdir):
    """Issue 35's fifth row: 400 connections of uid 65534 SUBSCRIBE to its lifecycle events and
    never read, while it makes REPLACES `START … REPLACE`s over 1,000 names of its own: the
    daemon's RSS growth at its peak (sampled every 50 ms), against the per-user output limit."""
    directory = run.fresh_dir(workdir, "replace")
    daemon = attacker_daemon(directory)
    try:
        as_nobody(["replaces", daemon.socket, "1000", "1000"])  # The names exist before the baseline.

        def attack():
            rss_before = daemon.rss_bytes()
            stop_subscribers = hold(["subscribers", daemon.socket, "400"], directory, "lifecycle", after=["lifecycle"])
            peak = [0]
            storming = threading.Event()
            storming.set()

            def sample():
                while storming.is_set():
                    peak[0] = max(peak[0], daemon.rss_bytes() - rss_before)
                    time.sleep(0.05)
            sampler = threading.Thread(target=sample)
            sampler.start()
            storm = subprocess.Popen(AS_NOBODY + ["replaces", daemon.socket, "1000", str(REPLACES)], stdout=subprocess.PIPE, text=True)

            def stop():
                answered = storm.communicate(timeout=600)[0].strip()
                storming.clear()
                sampler.join()
                stop_subscribers()
                if answered != "ok=%d" % REPLACES:
                    raise RuntimeError("the storm was not answered in full: %s" % answered)
                # The daemon's own count of the most the attacker's connections held queued
                # together: what --output-limit-per-user bounds, where RSS adds the allocator.
                return {"rss_peak": peak[0], "queued_peak": int(run.stats(daemon.socket)["user_output_peak_bytes"])}
            return stop
        return bystander(directory, daemon, attack)
    finally:
        daemon.stop()
        shutil.rmtree(directory, ignore_errors=True)


def what_numbers_tell(workdir):
    """Issue 35's sixth row: what uid 65534 can read of others' changes. It asks for its numbers
    and its replay history (4 events deep here, its own 6 changes made) before and after root
    makes 7 changes and uid 12345 makes 5; returns how many of its lines differ (0: nothing)."""
    directory = run.fresh_dir(workdir, "numbers")
    os.chmod(directory, 0o755)
    daemon = run.Daemon(directory, extra=["--socket-mode", "0666", "--replay-events", "4"])
    try:
        as_nobody(["say", daemon.socket] + ["START a%d 1h" % i for i in range(6)])
        def look():
            # Each on a connection of its own; the greetings, and STATS lines that are not
            # about numbers (uptime, connections), left out.
            lines = []
            for probe in ("SUBSCRIBE nothing-here", "SUBSCRIBE SINCE 0", "STATS"):
                lines += [line for line in as_nobody(["say", daemon.socket, probe]).splitlines()[1:]
                          if not line.startswith("STAT") or "seq" in line or "kept_after" in line]
            return lines
        before = look()
        run.pipelined(daemon.socket, ["START r%d 1h\n" % i for i in range(7)])
        subprocess.run(["setpriv", "--reuid=12345", "--regid=12345", "--clear-groups", "python3", FLOOD, "say", daemon.socket]
                       + ["START o%d 1h" % i for i in range(5)], check=True, capture_output=True, timeout=60)
        after = look()
        if len(before) < 4:
            raise RuntimeError("the probe saw too little: %s" % before)
        return sum(1 for a, b in zip(before, after) if a != b) + abs(len(before) - len(after))
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


SCENARIOS = (
    ("subscribers", scenario_subscribers), ("churn", scenario_churn), ("prefix", scenario_prefix_readers),
    ("connections", scenario_connections), ("named", scenario_named), ("replace", scenario_replace_storm),
)
ATTACKS = (
    ("subscribers", "100,000 ticking countdowns and 100 subscribers that never read, joining while it is measured"),
    ("churn", "75,000 lifecycle events in a burst (START, CANCEL, REMOVE of 25,000)"),
    ("prefix", "250 subscribers to the prefix of its own churn, reading, while 4 connections make 60,000 lifecycle events"),
    ("connections", "its whole connection quota (1,000), held open"),
    ("named", "50 connections that each SUBSCRIBE to 10,000 of its ticking countdowns by name and never read"),
    ("replace", "400 subscribers to its lifecycle events that never read, while it makes 50,000 `START … REPLACE`s"),
)


def main():
    global RUNS, ATTACK_COUNTDOWNS, ROOT_COUNTDOWNS, WINDOW_S, NAMED, REPLACES
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="tiny sizes and one run: a smoke test, not a measurement; writes nothing")
    parser.add_argument("--only", choices=["subscribers", "churn", "prefix", "connections", "named", "replace"], help="only root beside this attack, 3 runs; writes nothing")
    args = parser.parse_args()
    if args.quick:
        RUNS, ATTACK_COUNTDOWNS, ROOT_COUNTDOWNS, WINDOW_S, NAMED, REPLACES = 1, 5_000, 20, 4, 1_000, 5_000
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
            for name, body in SCENARIOS:
                if args.only and name != args.only:
                    continue
                run.log("round %d: root beside %s" % (round_index + 1, name))
                f.setdefault(name, []).append(body(workdir))
                if args.only:
                    r = f[name][-1]
                    print("%s: PING p99 %.2f ms max %.2f ms; done p99 %.2f ms (%d); RSS after it left %+.2f MiB%s" % (
                        name, r["ping"]["p99"], r["ping"]["max"], r["done"]["p99"], r["done_count"], r["rss_left"] / (1 << 20),
                        "; RSS peak +%.1f MiB, queued at most %.2f MiB" % (r["rss_peak"] / (1 << 20), r["queued_peak"] / (1 << 20)) if "rss_peak" in r else ""), flush=True)
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
            run.log("round %d: what a user's numbers tell of others" % (round_index + 1))
            f.setdefault("numbers", []).append(what_numbers_tell(workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    if args.only:
        return
    mib = 1 << 20
    lines = [
        "Written by `make bench-hostile` (`bench/hostile.py`) on %s, commit `%s`. uid 65534 attacks within its quotas while root is measured: root's PING every millisecond (`bench/bystander.c`), and %d root countdowns of 1–15 s started over %d s, each `done`'s lateness measured from the instant its START was sent (so it includes the START's own reply time). The daemon's RSS after an attack is read %d s after the attacker's last connection closed (freed memory is given back at most once a second). %d runs; median (lowest–highest)." % (
            time.strftime("%Y-%m-%d"), subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(), ROOT_COUNTDOWNS, WINDOW_S // 2, RELEASE_WAIT_S, RUNS),
        "",
        "| figure | target | median (lowest–highest) | met |",
        "|---|---|---|---|",
    ]
    for key, label in ATTACKS:
        runs = f[key]
        lines.append("| root's PING p99, beside %s | ≤ 5 ms | %s ms | %s |" % (label, cell([r["ping"]["p99"] for r in runs], "%.2f"), met([r["ping"]["p99"] for r in runs], 5)))
        lines.append("| root's PING max, the same | ≤ 50 ms | %s ms | %s |" % (cell([r["ping"]["max"] for r in runs], "%.2f"), met([r["ping"]["max"] for r in runs], 50)))
        lines.append("| root's `done` lateness p99, the same | ≤ 5 ms | %s ms | %s |" % (cell([r["done"]["p99"] for r in runs], "%.2f"), met([r["done"]["p99"] for r in runs], 5)))
        if key == "replace":
            peaks = [r["rss_peak"] / mib for r in runs]
            queued = [r["queued_peak"] / mib for r in runs]
            lines.append("| uid 65534's output queued in the daemon at the most, all its connections together (`STATS`' `user_output_peak_bytes`) | ≤ 65 MiB (`--output-limit-per-user` + 1 MiB) | %s MiB | %s |" % (cell(queued, "%.2f"), met(queued, 65)))
            lines.append("| the daemon's RSS growth at the peak of it (the queued output, the allocator's free space, 400 connections) | ≤ 65 MiB | %s MiB | %s |" % (cell(peaks, "%.1f"), met(peaks, 65)))
        left = [abs(r["rss_left"]) / 1e6 for r in runs]
        lines.append("| the daemon's RSS once the attacker left, minus before (absolute) | ≤ 5 MB | %s MB | %s |" % (cell(left, "%.2f"), met(left, 5)))
    rss = f["rss"]
    lines.append("| RSS growth of a never-reading subscriber to 100,000 ticking countdowns, over 60 s (max of 60 samples) | ≤ 17 MiB (`--output-limit` + 1 MiB) | %s MiB | %s |" % (cell([r["max"] / mib for r in rss], "%.1f"), met([r["max"] / mib for r in rss], 17)))
    lines.append("| the same, last sample minus first (flat: about 0) | | %s MiB | |" % cell([(r["last"] - r["first"]) / mib for r in rss], "%.2f"))
    lines.append("| CPU per delivered event at 100,000, no never-reading subscriber | ≤ 1 µs | %s µs | %s |" % (cell(f["cpu0"], "%.2f"), met(f["cpu0"], 1)))
    lines.append("| CPU per delivered event at 100,000, 100 never-reading subscribers present | ≤ 1 µs | %s µs | %s |" % (cell(f["cpu100"], "%.2f"), met(f["cpu100"], 1)))
    lines.append("| the same ÷ without them, within each round | | %s× | |" % cell(f["cpu_ratio"], "%.2f"))
    lines.append("| a fresh client's PING answered after 10,000 connections closed at once | ≤ 50 ms | %s ms | %s |" % (cell(f["close"], "%.1f"), met(f["close"], 50)))
    lines.append("| lines of uid 65534's `seq`, replay history and `kept_after=` that moved when root and uid 12345 made 12 changes | 0 | %s | %s |" % (cell(f["numbers"], "%d"), met(f["numbers"], 0)))
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
