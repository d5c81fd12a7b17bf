#!/usr/bin/env python3
"""Cluster mode across a real network partition (issue 38, rows 5 and 6): three hosts on a real
three-member etcd, one of them (host 0) in a network namespace of its own, joined to etcd by a
veth pair; the partition is an iptables DROP rule inside that namespace, both ways, so packets
vanish as they do when a link fails (no refusal, no reset).

Two scenarios, each run `--runs` times:

  heal      host 0 is cut off from every member for `--partition` seconds (120 by default) with
            no client of its own; meanwhile countdowns started through host 1 fall due (and are
            finished by hosts 1 and 2). Measured from the heal: until host 0's copy has reached
            the revision etcd had at the heal (its `STATUS` reply's `replica <revision>`, asked
            every 20 ms), and until host 0's subscriber has had every `done` (the subscribers
            are current).
  member    only host 0's first member is cut off from host 0, for 40 s, while countdowns
            started through host 1 fall due. Measured: each host's subscriber's `done`
            lateness; and, through host 0 during the partition, a START followed at once by a
            STATUS of it (read-your-writes): how many STATUS replies said `not-found`.

Checked, whatever the speed: every subscriber gets each `done` exactly once, and etcd holds
each of them once. Needs root (network namespaces, iptables); prints why when it cannot run.

    python3 bench/clusterpartition.py [--runs 3] [--partition 120] [--scenarios heal,member]
"""
import argparse
import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run", os.path.join(HERE, "run.py"))
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)

HOSTS = 3
COUNTDOWNS = 150
MEMBER_PARTITION_S = 40


def sh(*command):
    subprocess.run(list(command), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Namespace:
    """A network namespace joined to this one by a veth pair: this side 10.231.<n>.1, the
    namespace's side 10.231.<n>.2."""

    def __init__(self):
        number = os.getpid() % 200 + 20
        self.name = "cdpart%d" % os.getpid()
        self.outer, self.inner = "cdpa%d" % os.getpid(), "cdpb%d" % os.getpid()
        self.address = "10.231.%d.1" % number
        sh("ip", "netns", "add", self.name)
        try:
            sh("ip", "link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
            sh("ip", "link", "set", self.inner, "netns", self.name)
            sh("ip", "addr", "add", self.address + "/24", "dev", self.outer)
            sh("ip", "link", "set", self.outer, "up")
            self.run("ip", "addr", "add", "10.231.%d.2/24" % number, "dev", self.inner)
            self.run("ip", "link", "set", self.inner, "up")
            self.run("ip", "link", "set", "lo", "up")
        except Exception:
            self.remove()
            raise

    def run(self, *command):
        sh("ip", "netns", "exec", self.name, *command)

    def prefix(self):
        return ["ip", "netns", "exec", self.name]

    def cut(self, ports):
        """Drops every packet between the namespace and these ports of the outer address."""
        for port in ports:
            self.run("iptables", "-A", "OUTPUT", "-p", "tcp", "-d", self.address, "--dport", str(port), "-j", "DROP")
            self.run("iptables", "-A", "INPUT", "-p", "tcp", "-s", self.address, "--sport", str(port), "-j", "DROP")

    def heal(self):
        self.run("iptables", "-F", "OUTPUT")
        self.run("iptables", "-F", "INPUT")

    def remove(self):
        subprocess.run(["ip", "netns", "del", self.name], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "link", "del", self.outer], stderr=subprocess.DEVNULL)


def can_run():
    """Why this benchmark cannot run here, or None."""
    if os.geteuid() != 0:
        return "it needs root (network namespaces and iptables)"
    for tool in ("ip", "iptables", "etcd"):
        if not shutil.which(tool):
            return "%s is not installed (make test-deps installs iproute2, iptables and etcd-server)" % tool
    return None


def ask(sock_path, line):
    """One request's reply lines, up to its final OK/ERR."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sock_path)
        f = s.makefile("rb")
        f.readline()
        s.sendall(line.encode() + b"\n")
        lines = []
        while True:
            reply = f.readline().decode()
            if not reply:
                return lines
            lines.append(reply.strip())
            if reply.startswith(("OK", "ERR")):
                return lines


def replica_revision(sock_path, probe):
    """The revision of a host's copy, from the `replica <revision>` of a STATUS of `probe`."""
    reply = ask(sock_path, "STATUS " + probe)
    final = reply[-1].split()
    if "replica" not in final:
        raise RuntimeError("STATUS answered %r" % reply)
    return int(final[final.index("replica") + 1])


def etcd_revision(endpoint):
    import json
    return int(json.loads(run.etcd_post(endpoint, "/v3/kv/range", {"key": "eA=="}))["header"]["revision"])


def etcd_done_writes(endpoint, tag):
    """How many times etcd's history wrote a `done` of each countdown named `tag…`: a watch of the
    whole prefix from revision 1 (nothing here compacts), read up to the revision etcd is at now
    (every host's heartbeat is under the prefix too, so events go on arriving past it)."""
    import base64, http.client, json
    target = etcd_revision(endpoint)
    host, port = endpoint[len("http://"):].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    body = {"create_request": {"key": base64.b64encode(b"/countdownd/").decode(),
                               "range_end": base64.b64encode(b"/countdownd0").decode(), "start_revision": "1"}}
    connection.request("POST", "/v3/watch", body=json.dumps(body), headers={"Content-Type": "application/json"})
    answer = connection.getresponse()
    counts = {}
    try:
        while True:
            line = answer.readline()
            if not line:
                raise RuntimeError("etcd's watch ended before revision %d" % target)
            for event in json.loads(line).get("result", {}).get("events", []):
                kv = event["kv"]
                name = base64.b64decode(kv["key"]).decode()[len("/countdownd/"):]
                if event.get("type") != "DELETE" and name.startswith(tag):
                    value = json.loads(base64.b64decode(kv.get("value", "")))
                    if value.get("event") == "done":
                        counts[name] = counts.get(name, 0) + 1
                if int(kv["mod_revision"]) >= target:
                    return counts
    finally:
        connection.close()


def start_hosts(workdir, etcd, namespace):
    hosts = []
    for index in range(HOSTS):
        members = etcd.endpoints[index:] + etcd.endpoints[:index]
        prefix = namespace.prefix() if index == 0 else ()
        hosts.append(run.Daemon(run.fresh_dir(workdir, "host%d" % index), extra=["--cluster", ",".join(members)], prefix=prefix))
    return hosts


def subscribe(workdir, hosts, expected, timeout):
    logs = []
    for number, host in enumerate(hosts):
        path = os.path.join(workdir, "done-%d-%d.log" % (number, os.getpid()))
        logs.append((path, run.start_eventlog("countdownd", host.socket, path, expected, timeout, "SUBSCRIBE EVENTS done")))
    return logs


def read_log(path, deadlines):
    """(name, read at in ms, lateness in ms) of each `done` of a name in `deadlines`."""
    rows = []
    for line in open(path):
        _boot, real, kind, name, _ = line.split()
        if kind == "done" and name in deadlines:
            rows.append((name, int(real) / 1e6, int(real) / 1e6 - deadlines[name]))
    return rows


def start_spread(sock_path, names, first_ms, last_ms):
    """START each name AT a deadline spread evenly over [first_ms, last_ms]; the deadlines."""
    deadlines = {name: first_ms + (last_ms - first_ms) * index // max(1, len(names) - 1) for index, name in enumerate(names)}
    replies = run.pipelined(sock_path, ["START %s AT %d\n" % (name, at) for name, at in deadlines.items()])
    refused = [r for r in replies if not r.startswith("OK ")]
    if refused:
        raise RuntimeError("%d STARTs refused, the first: %s" % (len(refused), refused[0].strip()))
    return deadlines


def check_once(logs, deadlines):
    for number, (path, _logger) in enumerate(logs):
        rows = read_log(path, deadlines)
        names = [name for name, _, _ in rows]
        if len(names) != len(set(names)) or len(names) != len(deadlines):
            raise RuntimeError("host %d: %d dones, %d distinct, of %d" % (number, len(names), len(set(names)), len(deadlines)))


@contextlib.contextmanager
def fleet(workdir, expected, timeout_s):
    """A namespace, an etcd whose members serve clients on its outer address, three hosts (host 0
    inside it) and a `done` subscriber on each (expecting `expected`); all removed at the end."""
    namespace = Namespace()
    etcd = hosts = logs = None
    try:
        etcd = run.Etcd(workdir, host=namespace.address)
        hosts = start_hosts(workdir, etcd, namespace)
        logs = subscribe(workdir, hosts, expected, int(timeout_s))
        yield namespace, etcd, hosts, logs
    finally:
        try:
            if hosts is not None:
                run.stop_cluster(etcd, hosts, [logger for _path, logger in (logs or [])])
            elif etcd is not None:
                etcd.stop()
        finally:
            namespace.remove()


def finish(logs, etcd, deadlines, tag):
    """Once every subscriber has every done: each host's lateness, and how many of `deadlines`
    etcd's history holds a done of, and more than one."""
    for number, (_path, logger) in enumerate(logs):
        if logger.wait(150) != 0:
            raise RuntimeError("host %d's subscriber did not get every done: %s" % (number, logger.stderr.read()))
    check_once(logs, deadlines)
    late = {number: run.percentiles([l for _, _, l in read_log(path, deadlines)]) for number, (path, _) in enumerate(logs)}
    writes = etcd_done_writes(etcd.endpoints[1], tag)
    return {"late": late,
            "done_in_etcd": sum(1 for name, count in writes.items() if count >= 1 and name in deadlines),
            "done_twice_in_etcd": sum(1 for name, count in writes.items() if count > 1 and name in deadlines)}


def heal_run(workdir, partition_s, tag):
    names = ["%s%d" % (tag, i) for i in range(COUNTDOWNS)]
    with fleet(workdir, len(names), partition_s + 120) as (namespace, etcd, hosts, logs):
        probe = tag + "probe"
        if not ask(hosts[1].socket, "START %s 3600" % probe)[-1].startswith("OK"):
            raise RuntimeError("the probe countdown was not started")
        while not ask(hosts[0].socket, "STATUS " + probe)[-1].startswith("OK"):
            time.sleep(0.01)
        namespace.cut(etcd.ports)
        cut_at = time.time()
        now_ms = int(cut_at * 1000)
        # Due from 5 s into the partition to 5 s before the heal: all committed by hosts 1 and 2.
        deadlines = start_spread(hosts[1].socket, names, now_ms + 5000, now_ms + int(partition_s * 1000) - 5000)
        while time.time() < cut_at + partition_s:
            time.sleep(0.05)
        status_at_heal = ask(hosts[0].socket, "STATUS %s" % names[-1])
        healed = time.time()  # Taken before the rules go: a heal that takes time only counts against it.
        namespace.heal()
        target = etcd_revision(etcd.endpoints[1])
        replica_at = None
        while replica_at is None and time.time() < healed + 120:
            if replica_revision(hosts[0].socket, probe) >= target:
                replica_at = time.time()
            else:
                time.sleep(0.02)
        result = finish(logs, etcd, deadlines, tag)
        last_read = max(read for _, read, _ in read_log(logs[0][0], deadlines)) / 1000
        result.update({"replica_current_s": (replica_at - healed) if replica_at else None,
                       "subscriber_current_s": max(0.0, last_read - healed), "status_at_heal": status_at_heal[-1]})
        return result


def member_run(workdir, tag):
    names = ["%s%d" % (tag, i) for i in range(COUNTDOWNS)]
    with fleet(workdir, len(names), MEMBER_PARTITION_S + 120) as (namespace, etcd, hosts, logs):
        now_ms = int(time.time() * 1000)
        # The partition begins 2 s before the first deadline and ends 2 s after the last.
        deadlines = start_spread(hosts[1].socket, names, now_ms + 4000, now_ms + 2000 + (MEMBER_PARTITION_S - 2) * 1000)
        while time.time() * 1000 < now_ms + 2000:
            time.sleep(0.01)
        namespace.cut(etcd.ports[:1])
        cut_at = time.time()
        reads, not_found, behind, answered_s = 0, 0, 0, []
        index = 0
        while time.time() < cut_at + MEMBER_PARTITION_S:
            name = "%sw%d" % (tag, index)
            index += 1
            sent = time.monotonic()
            started = ask(hosts[0].socket, "START %s 600" % name)
            answered_s.append(time.monotonic() - sent)
            if not started[-1].startswith("OK"):
                continue
            status = ask(hosts[0].socket, "STATUS %s" % name)
            reads += 1
            not_found += any("not-found" in line for line in status)
            behind += status[-1].endswith(" behind")
            time.sleep(1)
        namespace.heal()
        result = finish(logs, etcd, deadlines, tag)
        result.update({"reads": reads, "not_found": not_found, "behind": behind,
                       "start_answer_s": run.percentiles([s * 1000 for s in answered_s])})
        return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partition", type=float, default=120, help="seconds host 0 is cut off in the heal scenario")
    parser.add_argument("--scenarios", default="heal,member")
    args = parser.parse_args()
    why = can_run()
    if why:
        print("SKIP bench-cluster-partition: " + why)
        return
    run.build_tools()
    workdir = tempfile.mkdtemp(prefix="cdpartition.")
    try:
        scenarios = args.scenarios.split(",")
        if "heal" in scenarios:
            results = []
            for index in range(args.runs):
                result = heal_run(workdir, args.partition, "h%d_" % index)
                results.append(result)
                print("heal run %d: replica current %.2f s and subscriber %.2f s after the heal; at the heal STATUS said '%s'; "
                      "lateness p99 host0 %.0f host1 %.0f host2 %.0f ms; dones in etcd %d, written twice %d" % (
                          index + 1, result["replica_current_s"] or -1, result["subscriber_current_s"], result["status_at_heal"],
                          result["late"][0]["p99"], result["late"][1]["p99"], result["late"][2]["p99"],
                          result["done_in_etcd"], result["done_twice_in_etcd"]), flush=True)
            print("heal after %.0f s: replica current %s s, subscriber current %s s (target <= 3 s: %s)" % (
                args.partition, run.cell([r["replica_current_s"] for r in results], "%.2f"),
                run.cell([r["subscriber_current_s"] for r in results], "%.2f"),
                run.met([max(r["replica_current_s"] or 1e9, r["subscriber_current_s"]) for r in results], 3)), flush=True)
        if "member" in scenarios:
            results = []
            for index in range(args.runs):
                result = member_run(workdir, "m%d_" % index)
                results.append(result)
                print("member run %d: done p99 host0 %.0f (max %.0f) host1 %.0f host2 %.0f ms; START through host0 p50 %.0f max %.0f ms; "
                      "STATUS after own START: %d of %d not-found, %d behind; dones in etcd %d, written twice %d" % (
                          index + 1, result["late"][0]["p99"], result["late"][0]["max"], result["late"][1]["p99"], result["late"][2]["p99"],
                          result["start_answer_s"]["p50"], result["start_answer_s"]["max"], result["not_found"], result["reads"],
                          result["behind"], result["done_in_etcd"], result["done_twice_in_etcd"]), flush=True)
            print("first member cut off %d s: host 0's done p99 %s ms (target <= 3000: %s)" % (
                MEMBER_PARTITION_S, run.cell([r["late"][0]["p99"] for r in results], "%.0f"),
                run.met([r["late"][0]["p99"] for r in results], 3000)), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
