#!/usr/bin/env python3
"""Cluster mode under a burst of deadlines (issue 38, item 5): N countdowns whose deadlines all
fall within one second, across three hosts on a real three-member etcd (loopback), beside the
same N on one host in local mode.

Each host starts a third of the countdowns as `START b<i> AT <unix ms>`, pipelined, all three
at once; the deadlines are spread evenly over one second that begins once every START is
surely in (`--lead`, default 5 s plus one second per 2,000 countdowns). Every host has one
subscriber (bench/eventlog.c, plain SUBSCRIBE), which reads every `done`: a `done`'s
lateness is when that subscriber read it (CLOCK_REALTIME) minus its deadline.

Beside each round, etcd's own floor (bench/etcdfloor.go, when Go is installed): a fresh
three-member etcd carrying the same burst with no countdownd in the way: one writer per
member writing its third of the keys as they fall due (transactions of up to 128
compare-and-puts of a `done`'s size, two in flight, through the JSON gateway) and one watcher
per member reading them all, lateness measured as above.

Checked, whatever the speed: every subscriber gets each `done` exactly once (a second `done`
of one name would be a `done` committed twice in etcd, since every host announces what the
watch brings). Counted: the fleet's etcd transactions and the changes they carried per `done`
(`STATS cluster_transactions` and `cluster_changes_sent`, before the first deadline and once
every `done` is in plus the take-over grace, so a late take-over is counted too).

    python3 bench/clusterburst.py [--counts 10000,30000,100000] [--runs 3] [--wait 300]

A subscriber that has not had every `done` `--wait` seconds after the last deadline stops;
the run then reports how many never came, rather than a lateness.

    python3 bench/clusterburst.py --counts 30000 --restart-after 2

measures a host restarted in the middle of the burst instead (SIGTERM, or SIGKILL with `--kill`, then started again on
its state directory, `--restart-after` seconds past the first deadline): when its copy holds
every `done` (`STATS running` 0), beside the other two hosts' last `done`, each `done` once on
those two, and how late the restarted host's own countdowns' `done`s came there. A negative
`--restart-after` restarts it before the first deadline (issue 38's row 7: `--counts 300
--restart-after -3`).
"""
import argparse
import base64
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run", os.path.join(HERE, "run.py"))
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)

HOSTS = 3
GRACE_S = 3  # past the take-over grace (2 s): a take-over sent late is counted


def plan(count, lead_s):
    """The deadlines, in Unix ms: `count` spread evenly over the second that starts `lead_s` from now."""
    first = int(time.time() * 1000 + lead_s * 1000)
    return first, [first + (index * 1000) // count for index in range(count)]


def start_all(sockets, count, deadlines):
    """Starts `b<i>` AT its deadline, host `i % len(sockets)`, every host at once; the names with
    their deadlines, from the OKs."""
    answers = [None] * len(sockets)
    failures = []

    def one(index):
        try:
            lines = ["START b%d AT %d\n" % (i, deadlines[i]) for i in range(index, count, len(sockets))]
            answers[index] = run.pipelined(sockets[index], lines)
        except Exception as error:  # surfaced below
            failures.append(repr(error))

    threads = [threading.Thread(target=one, args=(index,)) for index in range(len(sockets))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError("START load failed: " + "; ".join(failures))
    refused = [reply.strip() for replies in answers for reply in replies if not reply.startswith("OK ")]
    if refused:
        raise RuntimeError("%d STARTs were not answered OK, the first: %s" % (len(refused), refused[0]))
    return sum(len(replies) for replies in answers)


def read_dones(path, deadlines, only=None):
    """(lateness in ms of each distinct done, how many dones in all) from an eventlog file; with
    `only`, of the countdowns whose index it accepts."""
    late, total = {}, 0
    for line in open(path):
        _boot, real, kind, name, _ = line.split()
        if kind != "done" or not name.startswith("b") or (only is not None and not only(int(name[1:]))):
            continue
        total += 1
        late.setdefault(name, int(real) / 1e6 - deadlines[int(name[1:])])
    return list(late.values()), total


def measure(daemons, count, lead_s, wait_s, workdir, transactions, etcd=None):
    """One burst against `daemons` (one subscriber each); per-host results, and the CPU the
    daemons (and `etcd`'s members) used from the first deadline until the last subscriber was done."""
    logs = []
    try:
        for number, daemon in enumerate(daemons):
            path = os.path.join(workdir, "burst-%d.log" % number)
            # Stopped below once the wait is over, if still waiting; the timeout is a backstop.
            logs.append((path, run.start_eventlog("countdownd", daemon.socket, path, count, int(lead_s + wait_s + 120), "SUBSCRIBE EVENTS done")))
        first, deadlines = plan(count, lead_s)
        started = start_all([d.socket for d in daemons], count, deadlines)
        if started != count:
            raise RuntimeError("%d of %d STARTs answered" % (started, count))
        if time.time() * 1000 >= first:
            raise RuntimeError("the STARTs took past the first deadline (a longer --lead is needed)")
        before = [run.stats(d.socket) for d in daemons] if transactions else None
        members = etcd.processes if etcd else []
        while time.time() * 1000 < first:
            time.sleep(0.005)
        cpu_before = [d.cpu_seconds() for d in daemons] + [run.cpu_seconds(p.pid) for p in members]
        give_up = first / 1000 + 1 + wait_s
        for _path, logger in logs:
            while logger.poll() is None and time.time() < give_up:
                time.sleep(0.05)
        cpu_after = [d.cpu_seconds() for d in daemons] + [run.cpu_seconds(p.pid) for p in members]
        cpu = [after - before for before, after in zip(cpu_before, cpu_after)]
        hosts = []
        for path, logger in logs:
            if logger.poll() is None:
                logger.terminate()  # It writes out what it read, and stops.
            logger.wait()
            late, total = read_dones(path, deadlines)
            host = {"dones": total, "distinct": len(late), "missing": count - len(late)}
            if late:
                host["late"] = run.percentiles(late)
            hosts.append(host)
        result = {"hosts": hosts, "daemon_cpu_us_per_done": sum(cpu[:len(daemons)]) / count * 1e6,
                  "etcd_cpu_us_per_done": sum(cpu[len(daemons):]) / count * 1e6}
        if transactions:
            time.sleep(GRACE_S)
            after = [run.stats(d.socket) for d in daemons]
            sent = sum(int(a["cluster_transactions"]) - int(b["cluster_transactions"]) for a, b in zip(after, before))
            changes = sum(int(a["cluster_changes_sent"]) - int(b["cluster_changes_sent"]) for a, b in zip(after, before))
            result["transactions_per_done"] = sent / count
            result["changes_per_done"] = changes / count
        return result
    finally:
        for _path, logger in logs:
            if logger.poll() is None:
                logger.kill()
                logger.wait()


def done_value_bytes(endpoint):
    """The size of a `done`'s value in etcd (`b0`, root's, in the default prefix)."""
    answer = json.loads(run.etcd_post(endpoint, "/v3/kv/range", {"key": base64.b64encode(b"/countdownd/b0").decode()}))
    return len(base64.b64decode(answer["kvs"][0]["value"]))


def floor_tool():
    """bench/etcdfloor.go built into the benchmark's tools, or None without Go."""
    if not shutil.which("go"):
        return None
    path = os.path.join(run.TOOLS, "etcdfloor")
    subprocess.run(["go", "build", "-o", path, os.path.join(HERE, "etcdfloor.go")], check=True,
                   env=dict(os.environ, GO111MODULE="off", GOFLAGS="", GOCACHE=os.path.join(run.TOOLS, "gocache")))
    return path


def floor_run(workdir, tool, count, value_bytes):
    """etcd alone carrying the burst: each watcher's lateness percentiles."""
    etcd = run.Etcd(workdir)
    try:
        first = int(time.time() * 1000) + 2000
        out = subprocess.run([tool, "-endpoints", ",".join(etcd.endpoints), "-count", str(count), "-first", str(first),
                              "-value-bytes", str(value_bytes)], capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise RuntimeError("etcdfloor failed: " + out.stderr + out.stdout)
        watchers = []
        for line in out.stdout.splitlines():
            fields = line.replace(",", "").split()  # watcher I: SEEN of N p50 X p99 Y max Z ms
            watchers.append({"p50": float(fields[6]), "p99": float(fields[8]), "max": float(fields[10])})
        return watchers
    finally:
        etcd.stop()


def cluster_run(workdir, count, lead_s, wait_s):
    etcd = run.Etcd(workdir)
    hosts = []
    try:
        for index in range(HOSTS):
            # Each host lists the members starting from another (CLUSTER.md, *etcd for a fleet*):
            # the member a host talks to decodes and encodes its JSON, the most of etcd's work.
            members = etcd.endpoints[index:] + etcd.endpoints[:index]
            hosts.append(run.Daemon(run.fresh_dir(workdir, "host%d" % index), extra=["--cluster", ",".join(members)]))
        result = measure(hosts, count, lead_s, wait_s, workdir, transactions=True, etcd=etcd)
        result["value_bytes"] = done_value_bytes(etcd.endpoints[0])
        return result
    finally:
        run.stop_cluster(etcd, hosts)


def restart_run(workdir, count, lead_s, wait_s, restart_after_s, kill=False):
    """The burst with host 1 restarted (SIGTERM, then started again on its state directory)
    `restart_after_s` past the first deadline: how long until its copy holds every `done` (its
    `STATS running` is 0), beside the other hosts' last `done`, both from the first deadline."""
    etcd = run.Etcd(workdir)
    hosts, logs = [], []
    try:
        directories = []
        for index in range(HOSTS):
            members = etcd.endpoints[index:] + etcd.endpoints[:index]
            directories.append((run.fresh_dir(workdir, "host%d" % index), ["--cluster", ",".join(members)]))
            hosts.append(run.Daemon(directories[-1][0], extra=directories[-1][1]))
        for number in (0, 2):
            path = os.path.join(workdir, "restart-%d.log" % number)
            logs.append((path, run.start_eventlog("countdownd", hosts[number].socket, path, count, int(lead_s + wait_s + 120), "SUBSCRIBE EVENTS done")))
        first, deadlines = plan(count, lead_s)
        if start_all([h.socket for h in hosts], count, deadlines) != count:
            raise RuntimeError("not every START was answered")
        while time.time() * 1000 < first + restart_after_s * 1000:
            time.sleep(0.005)
        stopped = time.time()
        if kill:
            hosts[1].process.kill()  # SIGKILL: no stop of its own, nothing flushed.
            hosts[1].process.wait()
        else:
            hosts[1].stop()
        hosts[1] = run.Daemon(directories[1][0], extra=directories[1][1])
        ready = time.time()
        give_up = first / 1000 + 1 + wait_s
        current = None
        while current is None and time.time() < give_up:
            if int(run.stats(hosts[1].socket)["running"]) == 0:
                current = time.time()
            else:
                time.sleep(0.1)
        others = []
        for path, logger in logs:
            while logger.poll() is None and time.time() < give_up:
                time.sleep(0.05)
            if logger.poll() is None:
                logger.terminate()
            logger.wait()
            late, total = read_dones(path, deadlines)
            # Host 1's own countdowns (it started every third): what a restart may delay.
            own, _ = read_dones(path, deadlines, only=lambda index: index % HOSTS == 1)
            others.append({"dones": total, "distinct": len(late), "missing": count - len(late), "late": run.percentiles(late) if late else None,
                           "own_late": run.percentiles(own) if own else None})
        return {"restart_s": ready - stopped, "current_after_first_s": (current - first / 1000) if current else None,
                "others": others}
    finally:
        run.stop_cluster(etcd, hosts, [logger for _path, logger in logs])


def local_run(workdir, count, lead_s, wait_s):
    daemon = run.Daemon(run.fresh_dir(workdir, "local"))
    try:
        return measure([daemon], count, lead_s, wait_s, workdir, transactions=False)
    finally:
        daemon.stop()


def describe(host):
    if "late" not in host:
        return "no done in time"
    late = host["late"]
    text = "p50 %.1f p99 %.1f max %.1f ms" % (late["p50"], late["p99"], late["max"])
    if host["missing"]:
        text += ", **%d never done**" % host["missing"]
    if host["dones"] != host["distinct"]:
        text += ", **%d dones for %d names**" % (host["dones"], host["distinct"])
    return text


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="10000,30000,100000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--wait", type=float, default=300, help="seconds past the last deadline before a run stops waiting")
    parser.add_argument("--lead", type=float, default=None, help="seconds from the STARTs to the first deadline")
    parser.add_argument("--no-local", action="store_true", help="skip the one-host local-mode rows")
    parser.add_argument("--no-floor", action="store_true", help="skip etcd's floor")
    parser.add_argument("--bin", default=None, help="a directory holding the countdownd to measure (default: the release build)")
    parser.add_argument("--kill", action="store_true", help="with --restart-after: SIGKILL the host instead of SIGTERM")
    parser.add_argument("--restart-after", type=float, default=None,
                        help="instead: restart host 1 this many seconds past the first deadline, and measure when its copy holds every done")
    args = parser.parse_args()
    if not shutil.which("etcd"):
        raise SystemExit("clusterburst: etcd is not installed (make test-deps installs etcd-server)")
    run.build_tools()
    if args.bin:
        run.BIN = args.bin
    tool = None if args.no_floor else floor_tool()
    if tool is None and not args.no_floor:
        print("clusterburst: Go is not installed (make test-deps installs golang-go), so etcd's floor is not measured", flush=True)
    workdir = tempfile.mkdtemp(prefix="cdclusterburst.")
    failed = False
    if args.restart_after is not None:
        try:
            for count in [int(c) for c in args.counts.split(",")]:
                lead = args.lead if args.lead is not None else 5 + count / 2000
                current, others, own = [], [], []
                when = "%s %.1f s %s the first deadline" % ("SIGKILLed" if args.kill else "SIGTERMed", abs(args.restart_after), "past" if args.restart_after >= 0 else "before")
                for index in range(args.runs):
                    result = restart_run(workdir, count, lead, args.wait, args.restart_after, kill=args.kill)
                    last = max(h["late"]["max"] for h in result["others"] if h["late"]) / 1000
                    own_p99 = max(h["own_late"]["p99"] for h in result["others"] if h["own_late"])
                    print("N=%d run %d: host 1 %s, started again in %.2f s; its copy held every done %s s past the first deadline; "
                          "the other hosts' latest done %.2f s past its own deadline; host 1's own countdowns' dones there p99 %.1f ms; %s" % (
                              count, index + 1, when, result["restart_s"],
                              "%.2f" % result["current_after_first_s"] if result["current_after_first_s"] is not None else "never (within the wait)",
                              last, own_p99, "; ".join("%d dones (%d distinct, %d missing)" % (h["dones"], h["distinct"], h["missing"]) for h in result["others"])), flush=True)
                    failed |= any(h["missing"] or h["dones"] != h["distinct"] for h in result["others"])
                    current.append(result["current_after_first_s"])
                    others.append(last)
                    own.append(own_p99)
                print("N=%d, host 1 %s and started again: its copy current %s s past the first deadline; the others' latest done %s s past its own deadline (the deadlines span 1 s); "
                      "host 1's own countdowns' done p99 on the others %s ms" % (
                    count, when, run.cell(current, "%.2f"), run.cell(others, "%.2f"), run.cell(own, "%.1f")), flush=True)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if failed:
            raise SystemExit("clusterburst: some dones never came, or came twice (above)")
        return
    try:
        for count in [int(c) for c in args.counts.split(",")]:
            lead = args.lead if args.lead is not None else 5 + count / 2000
            worst_p99, worst_max, per_txn, local_p99, floor_p99, floor_max, ratio = [], [], [], [], [], [], []
            daemon_cpu, etcd_cpu = [], []
            for index in range(args.runs):
                result = cluster_run(workdir, count, lead, args.wait)
                for number, host in enumerate(result["hosts"]):
                    print("N=%d run %d host %d: %d dones (%d distinct): %s" % (
                        count, index + 1, number, host["dones"], host["distinct"], describe(host)), flush=True)
                    failed |= host["missing"] > 0 or host["dones"] != host["distinct"]
                print("N=%d run %d: %.3f etcd transactions and %.3f changes sent per done across the fleet; CPU per done: the daemons %.0f us, etcd %.0f us (all hosts and members)" % (
                    count, index + 1, result["transactions_per_done"], result["changes_per_done"], result["daemon_cpu_us_per_done"],
                    result["etcd_cpu_us_per_done"]), flush=True)
                daemon_cpu.append(result["daemon_cpu_us_per_done"])
                etcd_cpu.append(result["etcd_cpu_us_per_done"])
                complete = all(h["missing"] == 0 for h in result["hosts"])
                worst_p99.append(max(h["late"]["p99"] for h in result["hosts"]) if complete else None)
                worst_max.append(max(h["late"]["max"] for h in result["hosts"]) if complete else None)
                per_txn.append(1 / result["transactions_per_done"] if result["transactions_per_done"] else None)
                if tool:
                    floor = floor_run(workdir, tool, count, result["value_bytes"])
                    print("N=%d run %d etcd's floor (%d-byte values): %s" % (count, index + 1, result["value_bytes"], "; ".join(
                        "p50 %.1f p99 %.1f max %.1f ms" % (w["p50"], w["p99"], w["max"]) for w in floor)), flush=True)
                    floor_p99.append(max(w["p99"] for w in floor))
                    floor_max.append(max(w["max"] for w in floor))
                    ratio.append(worst_p99[-1] / floor_p99[-1] if worst_p99[-1] is not None else None)
                if not args.no_local:
                    local = local_run(workdir, count, lead, args.wait)["hosts"][0]
                    print("N=%d run %d local: %s" % (count, index + 1, describe(local)), flush=True)
                    local_p99.append(local["late"]["p99"] if "late" in local else None)
            print("N=%d: worst host's done p99 %s ms, max %s ms; dones per transaction %s; one host in local mode p99 %s ms" % (
                count, run.cell(worst_p99, "%.1f"), run.cell(worst_max, "%.1f"), run.cell(per_txn, "%.1f"), run.cell(local_p99, "%.2f")), flush=True)
            print("N=%d: CPU per done, the daemons %s us, etcd %s us" % (count, run.cell(daemon_cpu, "%.0f"), run.cell(etcd_cpu, "%.0f")), flush=True)
            if tool:
                print("N=%d: etcd's floor, worst watcher's p99 %s ms, max %s ms; countdownd's p99 / the floor's, within each round: %s" % (
                    count, run.cell(floor_p99, "%.1f"), run.cell(floor_max, "%.1f"), run.cell(ratio, "%.2f")), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if failed:
        raise SystemExit("clusterburst: some dones never came, or came twice (above)")


if __name__ == "__main__":
    main()
