#!/usr/bin/env python3
"""countdownd's client conformance suite: runs cases.json against a client's driver and the real daemon.

    python3 clients/conformance/run.py --daemon .build/debug/countdownd -- python3 clients/python/conformance_driver.py

The driver is the client under test, behind a small JSON-lines protocol on its stdin and stdout
(README.md beside this file). The harness owns the daemon: it starts it on a temporary socket
and state directory for each case, and does the fault steps to it (SIGSTOP, SIGCONT, SIGTERM and
a new start). Every wait is on a reply, an event or a process; the timeouts in the cases are the
calls' own, which the clients must honour, and generous bounds on the harness's side.

Prints one line per case, then `N passed, N failed, N skipped`; exits 1 if any failed.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
BOUND_S = 120  # The harness's own bound on any one step: far past every timeout in the cases.
GAVE_UP = ("timeout", "cancelled", "outcome-unknown")  # A call that ended without the daemon's answer.
DAEMON_ANSWERS = ("busy", "not-found", "bad-name", "bad-duration", "bad-request", "forbidden", "limit",
                  "unavailable", "gone", "overflow", "line-too-long", "unknown-command")


class CaseFailed(Exception):
    pass


def die_with_the_harness() -> None:
    """In the daemon's and driver's child before exec: SIGKILL when the harness goes, however it
    goes (a killed harness leaves no daemon behind)."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Spawner(threading.Thread):
    """Starts every child from one thread that lives as long as the harness: PR_SET_PDEATHSIG
    fires when the thread that forked the child ends, so a start done from a short-lived thread
    (a fault in the background) would kill its daemon as soon as that thread returned."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.jobs: "queue.Queue[Any]" = queue.Queue()
        self.start()

    def run(self) -> None:
        while True:
            arguments, keywords, box, ready = self.jobs.get()
            try:
                box.append(subprocess.Popen(*arguments, preexec_fn=die_with_the_harness, **keywords))
            except BaseException as error:  # noqa: BLE001 (handed to the caller)
                box.append(error)
            ready.set()

    def popen(self, *arguments: Any, **keywords: Any) -> subprocess.Popen:
        box: List[Any] = []
        ready = threading.Event()
        self.jobs.put((arguments, keywords, box, ready))
        ready.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]


SPAWNER: Optional[Spawner] = None


def spawn(*arguments: Any, **keywords: Any) -> subprocess.Popen:
    global SPAWNER
    if SPAWNER is None:
        SPAWNER = Spawner()
    return SPAWNER.popen(*arguments, **keywords)


class Daemon:
    """A countdownd on a temporary socket; stop and start keep its state directory."""

    def __init__(self, binary: str, directory: str, extra: List[str]):
        self.binary, self.directory, self.extra = binary, directory, extra
        self.socket = os.path.join(directory, "d.sock")
        self.state = os.path.join(directory, "state")
        self.process: Optional[subprocess.Popen] = None
        self.stopped = False  # SIGSTOPped.
        self.lock = threading.Lock()

    def start(self) -> None:
        notify = os.path.join(self.directory, "notify.sock")
        if os.path.exists(notify):
            os.unlink(notify)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        listener.bind(notify)
        listener.settimeout(BOUND_S)
        env = {k: v for k, v in os.environ.items() if k not in ("LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC")}
        env["NOTIFY_SOCKET"] = notify
        with self.lock:
            self.process = spawn(
                [self.binary, "--socket", self.socket, "--state-dir", self.state, "--log-level", "error"] + self.extra,
                env=env, stdout=subprocess.DEVNULL)
        try:
            while b"READY=1" not in listener.recv(4096).split(b"\n"):
                pass
        finally:
            listener.close()

    def stop(self) -> None:
        with self.lock:
            process = self.process
            if process is None:
                return
            if self.stopped:
                process.send_signal(signal.SIGCONT)
                self.stopped = False
            process.send_signal(signal.SIGTERM)
        process.wait(BOUND_S)
        with self.lock:
            self.process = None

    def signal(self, number: int) -> None:
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                self.process.send_signal(number)
                self.stopped = number == signal.SIGSTOP

    def kill(self) -> None:
        with self.lock:
            if self.process is not None:
                self.process.kill()
                self.process.wait(BOUND_S)
                self.process = None


class Flapper(threading.Thread):
    """Stops and continues the daemon at random (seeded) until told to stop; always leaves it running."""

    def __init__(self, daemon: Daemon, stop_ms: List[int], run_ms: List[int], seed: int):
        super().__init__(daemon=True)
        self.daemon_, self.stop_ms, self.run_ms = daemon, stop_ms, run_ms
        self.rng = random.Random(seed)
        self.done = threading.Event()
        self.stops = 0

    def run(self) -> None:
        while not self.done.is_set():
            self.daemon_.signal(signal.SIGSTOP)
            self.stops += 1
            self.done.wait(self.rng.uniform(*self.stop_ms) / 1000)
            self.daemon_.signal(signal.SIGCONT)
            self.done.wait(self.rng.uniform(*self.run_ms) / 1000)

    def finish(self) -> None:
        self.done.set()
        self.join(BOUND_S)
        self.daemon_.signal(signal.SIGCONT)


class Driver:
    """The client under test, a process speaking JSON lines."""

    def __init__(self, command: List[str]):
        self.process = spawn(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.next_id = 0
        self.lock = threading.Lock()
        self.replies: Dict[int, Dict[str, Any]] = {}
        self.arrived = threading.Condition()
        hello = self._read()
        if "hello" not in hello:
            raise RuntimeError("the driver's first line must be its hello, got %r" % hello)
        self.name = hello["hello"]
        self.capabilities = set(hello.get("capabilities", []))
        self.reader = threading.Thread(target=self._read_all, daemon=True)
        self.reader.start()

    def _read(self) -> Dict[str, Any]:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the driver exited (status %s)" % self.process.poll())
        return json.loads(line)

    def _read_all(self) -> None:
        while True:
            try:
                reply = self._read()
            except (RuntimeError, ValueError):
                with self.arrived:
                    self.replies[-1] = {"error": {"kind": "driver-exited", "message": "the driver exited or wrote garbage"}}
                    self.arrived.notify_all()
                return
            with self.arrived:
                self.replies[reply["id"]] = reply
                self.arrived.notify_all()

    def send(self, command: Dict[str, Any]) -> int:
        with self.lock:
            self.next_id += 1
            ident = self.next_id
            try:
                self.process.stdin.write(json.dumps(dict(command, id=ident)) + "\n")
                self.process.stdin.flush()
            except OSError:
                raise CaseFailed("the driver exited (status %s)" % self.process.poll()) from None
        return ident

    def reply(self, ident: int) -> Dict[str, Any]:
        deadline = time.monotonic() + BOUND_S
        with self.arrived:
            while ident not in self.replies:
                if -1 in self.replies:
                    raise CaseFailed("the driver exited")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CaseFailed("the driver gave no reply within %d s (a call that ignores its timeout?)" % BOUND_S)
                self.arrived.wait(left)
            return self.replies.pop(ident)

    def call(self, command: Dict[str, Any]) -> Dict[str, Any]:
        return self.reply(self.send(command))

    def close(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


def generate_calls(spec: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A storm's calls, from a seeded description (so every client gets the same ones)."""
    rng = random.Random(spec.get("seed", 0))
    methods = list(spec["methods"].items())
    population = [method for method, weight in methods for _ in range(weight)]
    calls = []
    for _ in range(spec["count"]):
        method = rng.choice(population)
        name = "%s%d" % (spec["prefix"], rng.randrange(spec["names"]))
        timeout = spec.get("timeout_ms")
        if isinstance(timeout, list):
            timeout = rng.randint(timeout[0], timeout[1])
        call: Dict[str, Any] = {"method": method, "name": name, "timeout_ms": timeout}
        if method == "start":
            call["duration"] = "10m"
        calls.append(call)
    return calls


def answered_name(call: Dict[str, Any], result: Dict[str, Any]) -> Optional[str]:
    """The countdown an answer speaks of: the name in an OK, or in the words of a busy or not-found."""
    if "ok" in result:
        value = result["ok"]
        if isinstance(value, list):
            return value[0]["name"] if value else call["name"]  # list-one: its one countdown, if any.
        return value.get("name") if isinstance(value, dict) else None
    error = result.get("error", {})
    if error.get("kind") in ("busy", "not-found"):
        return call["name"] if ("'%s'" % call["name"]) in error.get("message", "") else "<another>"
    return None


def check_storm(calls: List[Dict[str, Any]], results: List[Dict[str, Any]], expect: Dict[str, Any]) -> str:
    if len(results) != len(calls):
        raise CaseFailed("the storm returned %d results for %d calls" % (len(results), len(calls)))
    counts = {"crossed": 0, "answered": 0, "failed": 0, "gave_up": 0}
    kinds: Dict[str, int] = {}
    crossed_examples = []
    for call, result in zip(calls, results):
        error = result.get("error")
        if error:
            kinds[error["kind"]] = kinds.get(error["kind"], 0) + 1
        if error and error["kind"] not in DAEMON_ANSWERS:
            counts["failed"] += 1
            if error["kind"] in GAVE_UP:
                counts["gave_up"] += 1
            continue
        counts["answered"] += 1
        name = answered_name(call, result)
        if name is not None and name != call["name"]:
            counts["crossed"] += 1
            if len(crossed_examples) < 3:
                crossed_examples.append("%s %s answered %s" % (call["method"], call["name"], json.dumps(result)))
    for key, wanted in expect.items():
        if key == "errors_only":
            stray = {k: v for k, v in kinds.items() if k not in wanted and k not in DAEMON_ANSWERS}
            if stray:
                raise CaseFailed("errors other than %s: %s" % (wanted, stray))
        elif counts[key] != wanted:
            raise CaseFailed("%s: %d, expected %d (errors %s)%s" % (
                key, counts[key], wanted, kinds, ("; e.g. " + "; ".join(crossed_examples)) if crossed_examples else ""))
    return "%d calls: %d answered, %d crossed, errors %s" % (len(calls), counts["answered"], counts["crossed"], kinds)


def check(result: Dict[str, Any], expect: Dict[str, Any], what: str) -> None:
    if "any" in expect:
        problems = []
        for option in expect["any"]:
            try:
                check(result, option, what)
                return
            except CaseFailed as problem:
                problems.append(str(problem))
        raise CaseFailed(" and ".join(problems))
    error = result.get("error")
    if "error" in expect:
        wanted = expect["error"] if isinstance(expect["error"], list) else [expect["error"]]
        if not error or error.get("kind") not in wanted:
            raise CaseFailed("%s: expected error %s, got %s" % (what, "/".join(wanted), json.dumps(result)))
        if "maybe_applied" in expect and bool(error.get("maybe_applied")) != expect["maybe_applied"] \
                and error.get("kind") != "cancelled":
            raise CaseFailed("%s: expected maybe_applied %s, got %s" % (what, expect["maybe_applied"], json.dumps(result)))
        if "remaining_ms_between" in expect:
            low, high = expect["remaining_ms_between"]
            remaining = error.get("remaining_ms")
            if not isinstance(remaining, int) or not low <= remaining <= high:
                raise CaseFailed("%s: expected remaining_ms in [%d, %d], got %s" % (what, low, high, json.dumps(result)))
        if "message_names" in expect and ("'%s'" % expect["message_names"]) not in error.get("message", ""):
            raise CaseFailed("%s: the error's message should name '%s': %s" % (what, expect["message_names"], json.dumps(result)))
        return
    if error:
        raise CaseFailed("%s: expected an answer, got %s" % (what, json.dumps(result)))
    value = result.get("ok")
    if "count" in expect:
        if not isinstance(value, list) or len(value) != expect["count"]:
            raise CaseFailed("%s: expected %d countdowns, got %s" % (what, expect["count"], json.dumps(value)))
        return
    for key, wanted in expect.items():
        if not isinstance(value, dict) or value.get(key) != wanted:
            raise CaseFailed("%s: expected %s=%s, got %s" % (what, key, json.dumps(wanted), json.dumps(value)))


def run_case(case: Dict[str, Any], driver: Driver, binary: str) -> str:
    directory = tempfile.mkdtemp(prefix="cd-conformance-")
    daemon = Daemon(binary, directory, case.get("daemon", []))
    background: List[threading.Thread] = []
    flapper: Optional[Flapper] = None
    waits: Dict[str, int] = {}
    notes: List[str] = []
    try:
        daemon.start()
        reply = driver.call({"op": "connect", "socket": daemon.socket})
        if "error" in reply:
            raise CaseFailed("connect: %s" % json.dumps(reply))
        for number, step in enumerate(case["steps"], 1):
            what = "step %d (%s)" % (number, step.get("op") or step.get("fault"))
            fault = step.get("fault")
            if fault == "stall":
                daemon.signal(signal.SIGSTOP)
            elif fault == "resume":
                daemon.signal(signal.SIGCONT)
            elif fault == "stop":
                daemon.stop()
            elif fault == "start":
                def later(delay=step.get("after_ms", 0) / 1000):
                    time.sleep(delay)  # The outage's length is the fault itself, not a wait for an event.
                    daemon.start()
                if step.get("background"):
                    thread = threading.Thread(target=later, daemon=True)
                    thread.start()
                    background.append(thread)
                else:
                    later()
            elif fault == "restart":
                daemon.stop()
                time.sleep(step.get("down_ms", 0) / 1000)  # The outage itself.
                daemon.start()
            elif fault == "join":
                for thread in background:
                    thread.join(BOUND_S)
                background.clear()
            elif fault == "flap":
                flapper = Flapper(daemon, step["stop_ms"], step["run_ms"], step.get("seed", 0))
                flapper.start()
            elif fault == "steady":
                if flapper is not None:
                    flapper.finish()
                    notes.append("%d stops" % flapper.stops)
                    flapper = None
            elif step.get("op") == "storm":
                calls = generate_calls(step["generate"])
                reply = driver.call({"op": "storm", "workers": step["workers"], "calls": calls})
                if "error" in reply:
                    raise CaseFailed("%s: %s" % (what, json.dumps(reply)))
                notes.append(check_storm(calls, reply["ok"], step["expect"]))
            elif step.get("op") == "join":
                result = driver.reply(waits.pop(step["background"]))
                check(result, step["expect"], what)
            else:
                command = {k: v for k, v in step.items() if k not in ("expect", "background")}
                if step.get("background"):
                    waits[step["background"]] = driver.send(command)
                    continue
                result = driver.call(command)
                if "expect" in step:
                    check(result, step["expect"], what)
                elif "error" in result:
                    raise CaseFailed("%s: %s" % (what, json.dumps(result)))
        return "; ".join(notes)
    finally:
        if flapper is not None:
            flapper.finish()
        for thread in background:
            thread.join(BOUND_S)
        for ident in waits.values():
            try:
                driver.reply(ident)
            except CaseFailed:
                pass  # Reported by the case already.
        try:
            driver.call({"op": "reset"})
        finally:
            daemon.signal(signal.SIGCONT)
            daemon.kill()
            shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--daemon", default=os.environ.get("COUNTDOWND_BIN", ""), help="countdownd binary")
    parser.add_argument("--cases", default=os.path.join(HERE, "cases.json"))
    parser.add_argument("--only", action="append", help="run only these cases")
    parser.add_argument("driver", nargs=argparse.REMAINDER, help="the driver command, after --")
    args = parser.parse_args()
    command = [word for word in args.driver if word != "--"]
    if not args.daemon or not os.access(args.daemon, os.X_OK):
        print("error: give --daemon (or COUNTDOWND_BIN), a built countdownd", file=sys.stderr)
        return 2
    cases = json.load(open(args.cases))["cases"]
    driver = Driver(command)
    passed = failed = skipped = 0
    try:
        for case in cases:
            if args.only and case["name"] not in args.only:
                continue
            missing = [need for need in case.get("requires", []) if need not in driver.capabilities]
            if missing:
                skipped += 1
                print("SKIP %s %s: %s does not offer %s" % (driver.name, case["name"], driver.name, ", ".join(missing)), flush=True)
                continue
            began = time.monotonic()
            try:
                notes = run_case(case, driver, args.daemon)
                passed += 1
                print("PASS %s %s (%.1f s)%s" % (driver.name, case["name"], time.monotonic() - began,
                                                 (": " + notes) if notes else ""), flush=True)
            except CaseFailed as problem:
                failed += 1
                print("FAIL %s %s: %s (%s)" % (driver.name, case["name"], problem, case.get("why", "")), flush=True)
    finally:
        driver.close()
    print("%s: %d passed, %d failed, %d skipped" % (driver.name, passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
