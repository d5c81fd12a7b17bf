#!/usr/bin/env python3
"""Cluster mode: `done` lateness on every host, in issue 21's own configuration: a real
three-member etcd on loopback, three daemons, 3,000 deadlines over 10 s, no faults, nothing
else running (`make bench`'s cluster round measures 1,000 over 2 s on two hosts, after its two
START loads: a denser load than the target's).

Each host starts a third of the countdowns (1,000 each, 4–14 s, so deadlines fall over 10 s),
pipelined; every host has one subscriber (bench/eventlog.c, plain SUBSCRIBE, as in
`make bench`). A `done`'s lateness is when that subscriber read it (CLOCK_REALTIME) minus the
deadline the OK gave. Also counted: the fleet's etcd transactions per `done` (`STATS
cluster_transactions` before the first deadline and after the last `done`).

    python3 bench/clusterdone.py [--runs N]

Prints each run's p50/p99/max on each host, then the medians and spreads of the p99s.
"""
import argparse
import importlib.util
import os
import random
import shutil
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run", os.path.join(HERE, "run.py"))
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)

HOSTS = 3
COUNTDOWNS = 3000
FIRST_MS, LAST_MS = 4000, 14000  # deadlines over 10 s, the first after the STARTs are all in (they take 1-2 s)


def one_run(workdir, seed):
    etcd = run.Etcd(workdir)
    hosts, logs = [], []
    try:
        cluster = ["--cluster", ",".join(etcd.endpoints)]
        for index in range(HOSTS):
            hosts.append(run.Daemon(run.fresh_dir(workdir, "host%d" % index), extra=cluster))
        for host in hosts:
            path = os.path.join(workdir, "done-%d.log" % random.randrange(1 << 30))
            logs.append((path, run.start_eventlog("countdownd", host.socket, path, COUNTDOWNS, 60)))
        rng = random.Random(seed)
        deadlines = {}
        for index, host in enumerate(hosts):
            share = range(index, COUNTDOWNS, HOSTS)
            lines = ["START d%d %dms\n" % (i, int(FIRST_MS + rng.random() * (LAST_MS - FIRST_MS))) for i in share]
            for reply in run.pipelined(host.socket, lines):
                if reply.startswith("OK "):
                    fields = reply.split()
                    deadlines[fields[1]] = int(fields[5])
        if len(deadlines) != COUNTDOWNS:
            raise RuntimeError("only %d of %d STARTs were answered OK" % (len(deadlines), COUNTDOWNS))
        sent_before = sum(int(run.stats(host.socket)["cluster_transactions"]) for host in hosts)
        # Every deadline still ahead: the count above holds no done's transaction.
        if time.time() * 1000 >= min(deadlines.values()):
            raise RuntimeError("the STARTs took past the first deadline; the transaction count would miss dones")
        result = {"hosts": []}
        for number, (path, logger) in enumerate(logs):
            if logger.wait(90) != 0:
                raise RuntimeError("host %d's subscriber did not get %d dones: %s" % (number, COUNTDOWNS, logger.stderr.read()))
            rows = [l.split() for l in open(path)]
            dones = [(name, int(real) / 1e6 - deadlines[name]) for _boot, real, kind, name, _ in rows if kind == "done" and name in deadlines]
            distinct = len({name for name, _ in dones})
            if len(dones) != COUNTDOWNS or distinct != COUNTDOWNS:
                raise RuntimeError("host %d: %d dones, %d distinct, of %d" % (number, len(dones), distinct, COUNTDOWNS))
            result["hosts"].append({"late": run.percentiles([late for _, late in dones]), "dones": len(dones), "distinct": distinct})
            os.unlink(path)
        time.sleep(3)  # past another host's grace: a takeover it sent would be counted
        sent_after = sum(int(run.stats(host.socket)["cluster_transactions"]) for host in hosts)
        result["transactions_per_done"] = (sent_after - sent_before) / COUNTDOWNS
        return result
    finally:
        run.stop_cluster(etcd, hosts, [logger for _path, logger in logs])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not shutil.which("etcd"):
        raise SystemExit("clusterdone: etcd is not installed (make test-deps installs etcd-server)")
    run.build_tools()
    workdir = tempfile.mkdtemp(prefix="cdclusterdone.")
    results = []
    try:
        for index in range(args.runs):
            result = one_run(workdir, seed=index)
            results.append(result)
            for number, host in enumerate(result["hosts"]):
                late = host["late"]
                print("run %d host %d: %d dones (%d distinct), p50 %.2f p99 %.2f max %.2f ms" % (
                    index + 1, number, host["dones"], host["distinct"], late["p50"], late["p99"], late["max"]), flush=True)
            print("run %d: %.3f etcd transactions per done across the fleet" % (index + 1, result["transactions_per_done"]), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for number in range(HOSTS):
        p99 = [r["hosts"][number]["late"]["p99"] for r in results]
        print("host %d: done p99 %s ms" % (number, run.cell(p99, "%.2f")))
    every = [max(h["late"]["p99"] for h in r["hosts"]) for r in results]
    print("worst host's p99: %s ms (target 10 ms: %s)" % (run.cell(every, "%.2f"), run.met(every, 10)))
    print("transactions per done: %s" % run.cell([r["transactions_per_done"] for r in results], "%.3f"))


if __name__ == "__main__":
    main()
