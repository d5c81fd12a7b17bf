#!/usr/bin/env python3
"""Cluster mode: how long a fresh client waits, before, during and after a kill -9 of the etcd
leader under load (issue 21's target: served within 100 ms).

A real three-member etcd on loopback and two daemons on it. Host A takes STARTs from 8 clients
pipelining 16 each (bench/loadgen.c) for the whole run; a fresh client connects to each host
every 50 ms (bench/bystander.c `fresh`: connect, greeting, PING, reply, close). At 4 s the etcd
leader is killed with SIGKILL; at 10 s it is started again; the run ends at 16 s. Three runs.

    python3 bench/leaderkill.py [--runs N]

Prints, per run and phase (before the kill, while the leader is down, after it is back), the
fresh clients' p50, p99 and max in milliseconds and how many failed, then the medians.
"""
import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run", os.path.join(HERE, "run.py"))
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)

KILL_AT, BACK_AT, END_AT = 4.0, 10.0, 16.0


def leader_index(etcd):
    """The member that leads now, by asking each for its status."""
    for index, endpoint in enumerate(etcd.endpoints):
        try:
            status = json.loads(run.etcd_post(endpoint, "/v3/maintenance/status", {}))
        except (OSError, ValueError):
            continue
        if status.get("leader") and status.get("leader") == status.get("header", {}).get("member_id"):
            return index
    raise RuntimeError("no etcd member says it leads")


def one_run(workdir):
    etcd = run.Etcd(workdir)
    hosts, probers, load = [], [], None
    try:
        cluster = ["--cluster", ",".join(etcd.endpoints)]
        hosts = [run.Daemon(run.fresh_dir(workdir, "a"), extra=cluster), run.Daemon(run.fresh_dir(workdir, "b"), extra=cluster)]
        outputs = [os.path.join(workdir, "fresh-%d.txt" % i) for i in range(2)]
        for host, out in zip(hosts, outputs):
            prober = subprocess.Popen([os.path.join(run.TOOLS, "bystander"), host.socket, "50000", out, "fresh"], stdout=subprocess.PIPE, text=True)
            if prober.stdout.readline().strip() != "READY":
                raise RuntimeError("the prober did not connect")
            probers.append(prober)
        started = time.monotonic()
        load = subprocess.Popen([os.path.join(run.TOOLS, "loadgen"), hosts[0].socket, "8", "10000000", "16", "k"],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(KILL_AT - (time.monotonic() - started))
        victim = leader_index(etcd)
        arguments = etcd.processes[victim].args
        etcd.processes[victim].send_signal(signal.SIGKILL)
        etcd.processes[victim].wait()
        killed = time.monotonic() - started
        time.sleep(BACK_AT - (time.monotonic() - started))
        etcd.processes[victim] = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        back = time.monotonic() - started
        time.sleep(END_AT - (time.monotonic() - started))
        load.send_signal(signal.SIGTERM)
        for prober in probers:
            prober.send_signal(signal.SIGTERM)
            prober.wait(30)
        result = {}
        for name, out in zip(("host A (loaded)", "host B"), outputs):
            phases = {"before": [], "during": [], "after": []}
            failed = {"before": 0, "during": 0, "after": 0}
            for line in open(out):
                offset, latency = (int(x) for x in line.split())
                phase = "before" if offset / 1e9 < killed else ("during" if offset / 1e9 < back else "after")
                if latency < 0:
                    failed[phase] += 1
                else:
                    phases[phase].append(latency / 1e6)
            result[name] = {phase: dict(run.percentiles(values) or {}, failed=failed[phase]) for phase, values in phases.items()}
        return result
    finally:
        run.stop_cluster(etcd, hosts, [load] + probers)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    run.build_tools()
    if not shutil.which("etcd"):
        sys.exit("etcd is not installed (Debian's etcd-server)")
    results = []
    for index in range(args.runs):
        workdir = tempfile.mkdtemp(prefix="leaderkill.")
        try:
            results.append(one_run(workdir))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        for host, phases in results[-1].items():
            print("run %d, %s: %s" % (index + 1, host, "; ".join(
                "%s p50 %.2f p99 %.2f max %.2f ms, %d failed of %d" % (
                    phase, f.get("p50", 0), f.get("p99", 0), f.get("max", 0), f["failed"], f.get("n", 0) + f["failed"])
                for phase, f in phases.items())), flush=True)
    for host in results[0]:
        for phase in ("before", "during", "after"):
            for figure in ("p99", "max"):
                s = run.summarize([r[host][phase].get(figure) for r in results])
                if s:
                    print("%s, %s, %s: %.2f (%.2f–%.2f) ms" % (host, phase, figure, *s))


if __name__ == "__main__":
    main()
