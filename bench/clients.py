#!/usr/bin/env python3
"""The Python client's own cost per unpipelined START, against redis-py's per SET NX PX (issue 33).

    make bench-clients     (a release countdownd; redis-server and redis-py installed when they can be)

One process, one connection each, N sequential calls of fresh names: countdownd's `Client.start`
and `AsyncClient.start`, redis-py's `set(name, 1, nx=True, px=60000)` (blocking and asyncio).
What is compared is the *client's* CPU per call (this process's CPU time over the calls, so the
servers' own work does not count), and the round trip as the caller sees it. Rounds alternate
countdownd and Redis back to back; each figure is the median (lowest-highest) of the rounds, and
the ratio is taken within each round. Bounded: N calls per side per round, three rounds.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python", "src"))

from countdownd import AsyncClient, Client  # noqa: E402

CALLS = int(os.environ.get("BENCH_CLIENT_CALLS", "20000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def start_countdownd(binary: str, directory: str) -> subprocess.Popen:
    notify = os.path.join(directory, "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(notify)
    listener.settimeout(60)
    env = dict(os.environ, NOTIFY_SOCKET=notify)
    process = subprocess.Popen([binary, "--socket", os.path.join(directory, "d.sock"), "--state-dir",
                                os.path.join(directory, "state"), "--log-level", "error",
                                "--max-countdowns", str(ROUNDS * CALLS * 3 + 1000),
                                "--max-countdowns-per-user", str(ROUNDS * CALLS * 3 + 1000)],
                               env=env, stdout=subprocess.DEVNULL)
    while b"READY=1" not in listener.recv(4096).split(b"\n"):
        pass
    listener.close()
    return process


def start_redis(directory: str) -> subprocess.Popen:
    path = os.path.join(directory, "redis.sock")
    process = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", path, "--save", "",
                                "--appendonly", "no", "--dir", directory], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError("redis-server did not start")
        time.sleep(0.01)  # Polling for the socket file: redis-server has no readiness notice here.
    return process


def measure(calls) -> tuple:
    """(client CPU µs per call, wall µs per call)."""
    cpu, wall = time.process_time(), time.perf_counter()
    calls()
    return ((time.process_time() - cpu) / CALLS * 1e6, (time.perf_counter() - wall) / CALLS * 1e6)


def main() -> int:
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".build", "release", "countdownd")
    try:
        import redis
        import redis.asyncio
    except ImportError:
        print("redis-py is not installed (pip install redis): no comparison", file=sys.stderr)
        return 1
    if not shutil.which("redis-server"):
        print("redis-server is not installed: no comparison", file=sys.stderr)
        return 1
    directory = tempfile.mkdtemp(prefix="cd-bench-clients-")
    daemon = start_countdownd(binary, directory)
    server = start_redis(directory)
    rows = {key: [] for key in ("cd", "redis", "cd_async", "redis_async")}
    try:
        client = Client(os.path.join(directory, "d.sock"))
        pool = redis.Redis(unix_socket_path=os.path.join(directory, "redis.sock"))
        pool.ping()
        for round_number in range(ROUNDS):
            rows["cd"].append(measure(lambda: [client.start("b%d-%d" % (round_number, i), 60) for i in range(CALLS)]))
            rows["redis"].append(measure(lambda: [pool.set("b%d-%d" % (round_number, i), 1, nx=True, px=60000) for i in range(CALLS)]))

            async def asynchronous():
                aclient = await AsyncClient.connect(os.path.join(directory, "d.sock"))
                aredis = redis.asyncio.Redis(unix_socket_path=os.path.join(directory, "redis.sock"))
                await aredis.ping()
                cpu, wall = time.process_time(), time.perf_counter()
                for i in range(CALLS):
                    await aclient.start("a%d-%d" % (round_number, i), 60)
                cd = ((time.process_time() - cpu) / CALLS * 1e6, (time.perf_counter() - wall) / CALLS * 1e6)
                cpu, wall = time.process_time(), time.perf_counter()
                for i in range(CALLS):
                    await aredis.set("a%d-%d" % (round_number, i), 1, nx=True, px=60000)
                rd = ((time.process_time() - cpu) / CALLS * 1e6, (time.perf_counter() - wall) / CALLS * 1e6)
                await aclient.close()
                await aredis.aclose()
                return cd, rd
            cd, rd = asyncio.run(asynchronous())
            rows["cd_async"].append(cd)
            rows["redis_async"].append(rd)
        client.close()
    finally:
        for process in (daemon, server):
            process.send_signal(signal.SIGTERM)
            process.wait(60)
        shutil.rmtree(directory, ignore_errors=True)

    def summary(values):
        return "%.1f (%.1f-%.1f)" % (statistics.median(values), min(values), max(values))
    print("%d unpipelined calls per side per round, %d rounds, redis-py %s" % (CALLS, ROUNDS, redis.__version__))
    print("| client | client CPU per call (us) | round trip (us) | CPU ratio to redis-py, within each round | met (<= 1.5x) |")
    print("|---|---|---|---|---|")
    for ours, theirs, label in (("cd", "redis", "blocking"), ("cd_async", "redis_async", "asyncio")):
        ratios = [a[0] / b[0] for a, b in zip(rows[ours], rows[theirs])]
        met = "yes" if max(ratios) <= 1.5 else ("**no**" if statistics.median(ratios) > 1.5 else "**no** (spread crosses it)")
        print("| countdownd %s `start` | %s | %s | %s | %s |" % (label, summary([r[0] for r in rows[ours]]),
                                                               summary([r[1] for r in rows[ours]]), summary(ratios) + "x", met))
        print("| redis-py %s `set(nx, px)` | %s | %s | | |" % (label, summary([r[0] for r in rows[theirs]]),
                                                            summary([r[1] for r in rows[theirs]])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
