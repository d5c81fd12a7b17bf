#!/usr/bin/env python3
"""A cycle of phases through SIGKILLs at random moments (issue 36's row): 1,000 phases (999
boundaries) of 100-190 ms, the daemon killed and started again on the same state directory at
random moments, a third of them within 20 ms of a boundary. Afterwards `SUBSCRIBE SINCE 0`
must replay each boundary's `phase` event exactly once, in order, then one `done`; and every
deadline the daemon showed after a restart must be where the sum of the phases puts it (the
drift against the deadline-based schedule, in ms).

    python3 bench/cycle_kills.py [--daemon .build/release/countdownd] [--seed 36]

Prints one line of figures; exits 1 when an event was lost, repeated or out of order.
"""
import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PHASES = [100 + 10 * i for i in range(10)]  # ms; 10 phases a round
ROUNDS = 100


def connect(path, deadline):
    while True:
        try:
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(path)
            stream = sock.makefile("rwb", buffering=0)
            greeting = stream.readline()
            if greeting.startswith(b"HELLO"):
                return sock, stream
            sock.close()
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the daemon did not come up: " + open(os.path.join(os.path.dirname(path), "log"), errors="replace").read()[-2000:])
        time.sleep(0.005)


def request(stream, line):
    stream.write((line + "\n").encode())
    lines = []
    while True:
        reply = stream.readline().decode().rstrip("\n")
        lines.append(reply)
        if reply.startswith("OK") or reply.startswith("ERR"):
            return lines


def fields(words):
    return dict(word.split("=", 1) for word in words if "=" in word)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--daemon", default=".build/release/countdownd")
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    directory = tempfile.mkdtemp(prefix="cycle-kills-")
    socket_path = os.path.join(directory, "s")
    state = os.path.join(directory, "state")

    def launch():
        return subprocess.Popen([args.daemon, "--socket", socket_path, "--state-dir", state],
                                stdout=subprocess.DEVNULL, stderr=open(os.path.join(directory, "log"), "ab"))

    daemon = launch()
    sock, stream = connect(socket_path, time.monotonic() + 30)
    phases = ",".join("%dms:p%d" % (ms, i) for i, ms in enumerate(PHASES))
    started = request(stream, "START c CYCLE %s REPEAT %d" % (phases, ROUNDS))[-1].split()
    first_deadline = int(started[5])
    # The deadline each phase must have, from the first one alone: boundaries come from deadlines.
    expected = []
    deadline = first_deadline
    for round_index in range(ROUNDS):
        for index, ms in enumerate(PHASES):
            if round_index or index:
                deadline += ms
            expected.append(deadline)
    end = expected[-1]
    kills = near = 0
    drift = []
    sock.close()
    while True:
        now = time.time() * 1000
        if now > end + 500:
            break
        # Where to kill: near the next boundary (within 20 ms) one time in three, else anywhere
        # in the next 0-600 ms.
        upcoming = [d for d in expected if d > now + 25]
        if upcoming and rng.random() < 1 / 3:
            target = upcoming[0] + rng.uniform(-20, 20)
            near += 1
        else:
            target = now + rng.uniform(0, 600)
        time.sleep(max(0, target - time.time() * 1000) / 1000)
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        kills += 1
        daemon = launch()
        sock, stream = connect(socket_path, time.monotonic() + 30)
        status = request(stream, "STATUS c")
        words = status[0].split()
        if words[0] == "COUNTDOWN" and words[2] == "running":
            where = fields(words)
            phase = int(where["phase"].split("/")[0]) - 1
            round_index = int(where["round"].split("/")[0]) - 1
            drift.append(abs(int(words[5]) - expected[round_index * len(PHASES) + phase]))
        sock.close()
    # Everything that happened, from the daemon's own history.
    sock, stream = connect(socket_path, time.monotonic() + 30)
    request(stream, "SUBSCRIBE c EVENTS lifecycle SINCE 0")
    events = []
    while not events or events[-1][0] != "done":
        words = stream.readline().decode().split()
        if words and words[0] == "EVENT":
            where = fields(words)
            phase = int(where["phase"].split("/")[0]) - 1
            round_index = int(where.get("round", "1/1").split("/")[0]) - 1
            events.append((words[2], round_index * len(PHASES) + phase, int(words[1])))
    sock.close()
    daemon.send_signal(signal.SIGTERM)
    daemon.wait()
    shutil.rmtree(directory, ignore_errors=True)
    phase_positions = [position for kind, position, _ in events if kind == "phase"]
    boundaries = len(PHASES) * ROUNDS - 1
    missing = len(set(range(1, boundaries + 1)) - set(phase_positions))
    repeated = len(phase_positions) - len(set(phase_positions))
    in_order = phase_positions == sorted(phase_positions)
    numbered = all(b[2] == a[2] + 1 for a, b in zip(events, events[1:]))
    dones = sum(1 for kind, _, _ in events if kind == "done")
    print("boundaries %d, kills %d (%d within 20 ms of a boundary), phase events %d: missing %d, repeated %d, in order %s, "
          "numbered one by one %s, done %d; deadline drift after restarts max %d ms over %d samples" % (
              boundaries, kills, near, len(phase_positions), missing, repeated, in_order, numbered, dones,
              max(drift or [0]), len(drift)))
    return 0 if missing == 0 and repeated == 0 and in_order and numbered and dones == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
