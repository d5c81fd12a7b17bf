"""The library against a real countdownd: $COUNTDOWND_BIN (make test sets it), on a temporary
socket and state directory. Every wait is on an event or a reply, with generous deadlines."""
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

import countdownd  # noqa: E402
from countdownd import AsyncClient, Busy, Client, NotFound  # noqa: E402
from countdownd.protocol import BadDuration, BadName, error_from, parse_line  # noqa: E402

BINARY = os.environ.get("COUNTDOWND_BIN", "")
DEADLINE = 60


class Daemon:
    """A countdownd on a temporary socket; `restart` keeps its state directory."""

    def __init__(self, directory, extra=()):
        self.directory = directory
        self.extra = list(extra)
        self.socket = os.path.join(directory, "d.sock")
        self.state = os.path.join(directory, "state")
        self.process = None
        self.start()

    def start(self):
        notify = os.path.join(self.directory, "notify.sock")
        if os.path.exists(notify):
            os.unlink(notify)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        listener.bind(notify)
        listener.settimeout(DEADLINE)
        env = {k: v for k, v in os.environ.items() if k not in ("LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC")}
        env["NOTIFY_SOCKET"] = notify
        self.process = subprocess.Popen([BINARY, "--socket", self.socket, "--state-dir", self.state, "--log-level", "error"] + self.extra,
                                        env=env, stdout=subprocess.DEVNULL)
        try:
            while b"READY=1" not in listener.recv(4096).split(b"\n"):
                pass
        finally:
            listener.close()  # Later STATUS= updates fail at once; the daemon does not mind.

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(DEADLINE)

    def restart(self):
        self.stop()
        self.start()


@unittest.skipUnless(BINARY and os.access(BINARY, os.X_OK), "set COUNTDOWND_BIN to a built countdownd (make test does)")
class AgainstTheDaemon(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.mkdtemp(prefix="cd-python-")
        self.daemon = Daemon(self.directory)
        self.client = Client(self.daemon.socket, timeout=DEADLINE)

    def tearDown(self):
        self.client.close()
        self.daemon.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def test_requests(self):
        started = self.client.start("tea", "3m")
        self.assertEqual((started.name, started.state, started.total_ms), ("tea", "running", 180_000))
        self.assertEqual(self.client.start("egg", 1.5).total_ms, 1500)
        self.assertEqual(self.client.start("button").total_ms, 60_000, "60 s by default")
        pomodoro = self.client.start("pomodoro", "25m", pause_on_suspend=True)
        self.assertTrue(pomodoro.pauses_on_suspend and self.client.status("pomodoro").pauses_on_suspend)
        self.assertFalse(self.client.status("button").pauses_on_suspend)
        # Started again: None keeps the setting, False clears it.
        self.assertTrue(self.client.start("pomodoro", "25m", replace=True).pauses_on_suspend)
        self.assertFalse(self.client.start("pomodoro", "25m", replace=True, pause_on_suspend=False).pauses_on_suspend)
        # Set and cleared on the running countdown, which keeps its deadline.
        deadline = self.client.status("pomodoro").deadline_unix_ms
        self.assertTrue(self.client.set_pause_on_suspend("pomodoro", True).pauses_on_suspend)
        cleared = self.client.set_pause_on_suspend("pomodoro", False)
        self.assertEqual((cleared.pauses_on_suspend, cleared.state), (False, "running"))
        # Shown on the wall clock, mapped afresh for each reply: equal but for that mapping.
        self.assertLess(abs(cleared.deadline_unix_ms - deadline), 250)
        self.client.cancel("pomodoro")
        self.client.remove("pomodoro")
        self.assertEqual(self.client.pause("tea").state, "paused")
        self.assertEqual(self.client.status("tea").state, "paused")
        self.assertEqual(self.client.resume("tea").state, "running")
        self.assertEqual(self.client.extend("tea", 60).total_ms, 240_000)
        self.assertEqual(sorted(c.name for c in self.client.list()), ["button", "egg", "tea"])
        self.assertEqual([c.name for c in self.client.list(prefix="te")], ["tea"])
        self.assertEqual(self.client.cancel("tea").state, "cancelled")
        self.assertEqual([c.name for c in self.client.list(states=["cancelled"])], ["tea"])
        self.assertEqual(self.client.remove("tea").name, "tea")
        self.client.ping()
        stats = self.client.stats()
        self.assertIsInstance(stats["running"], int)
        self.assertEqual(stats["running"], 2)

    def test_cycles(self):
        focus = self.client.start("focus", cycle=[("25m", "work"), (300, "break")], repeat=2, pause_on_suspend=True)
        self.assertEqual((focus.phase, focus.phases, focus.label, focus.round, focus.rounds, focus.total_ms),
                         (1, 2, "work", 1, 2, 1_500_000))
        skipped = self.client.skip("focus")
        self.assertEqual((skipped.phase, skipped.label, skipped.total_ms, skipped.pauses_on_suspend), (2, "break", 300_000, True))
        self.assertEqual(self.client.status("focus").label, "break")
        forever = self.client.start("deep", cycle="50m:work,10m:break", repeat=True)
        self.assertEqual((forever.round, forever.rounds), (1, None))
        # Started again with no duration: the same phases from the first.
        self.assertEqual(self.client.start("focus", replace=True).phase, 1)
        self.client.start("tea", 60)
        with self.assertRaises(countdownd.protocol.BadRequest):
            self.client.skip("tea")
        self.assertIsNone(self.client.status("tea").phase)
        with self.assertRaises(ValueError):
            self.client.start("x", "5m", cycle="1m")
        with self.assertRaises(ValueError):
            self.client.start("x", repeat=2)
        self.client.start("quick", cycle=[0.2, 0.2])
        events = []
        for event in self.client.subscribe(["quick"], kinds=["lifecycle"], since=0, timeout=DEADLINE):
            events.append(event)
            if event.kind == "done":
                break
        self.assertEqual([(e.kind, e.phase) for e in events], [("started", 1), ("phase", 2), ("done", 2)])

    def test_errors(self):
        self.client.start("otp:+4915112345678", 60)
        with self.assertRaises(Busy) as raised:
            self.client.start("otp:+4915112345678", 60)
        busy = raised.exception
        self.assertEqual(busy.code, "busy")
        self.assertTrue(0 < busy.remaining_ms <= 60_000, busy.remaining_ms)
        self.assertEqual(busy.state, "running")
        self.assertNotIn("remaining_ms", busy.message)
        with self.assertRaises(NotFound):
            self.client.status("nothing")
        with self.assertRaises(BadDuration):
            self.client.start("x", "5 minutes")  # Refused before it is sent: one word.
        with self.assertRaises(BadDuration):
            self.client.start("x", "400d")  # Refused by the daemon.
        with self.assertRaises(BadName):
            self.client.start("two words", 5)
        # The connection still works after every error.
        self.client.ping()

    def test_wait(self):
        self.client.start("egg", "200ms")
        ended = self.client.wait("egg", timeout=DEADLINE)
        self.assertEqual((ended.name, ended.state), ("egg", "done"))
        # Already finished: answered at once from its state.
        self.assertEqual(self.client.wait("egg", timeout=DEADLINE).state, "done")
        with self.assertRaises(NotFound):
            self.client.wait("nothing", timeout=DEADLINE)

    def test_wait_across_restart(self):
        self.client.start("build", "1h")
        result = {}
        subscribed = threading.Event()

        def waiter():
            try:
                result["ended"] = self.client.wait("build", timeout=DEADLINE * 2)
            except Exception as error:  # Reported below.
                result["error"] = error
        # The waiter's subscription shows in the daemon's figures before the restart.
        thread = threading.Thread(target=waiter)
        thread.start()
        for _ in range(DEADLINE * 100):
            if self.client.stats()["subscribers"] == 1:
                subscribed.set()
                break
            threading.Event().wait(0.01)
        self.assertTrue(subscribed.is_set(), "the waiter subscribed")
        self.client.close()
        self.daemon.restart()
        self.client = Client(self.daemon.socket, timeout=DEADLINE)
        self.client.cancel("build")
        thread.join(DEADLINE * 2)
        self.assertNotIn("error", result)
        self.assertEqual(result["ended"].state, "cancelled")

    def test_subscribe_prefix_across_restart(self):
        """Through a restart, a prefix subscriber sees every lifecycle event once, in order."""
        seen = []
        first = threading.Event()
        done = threading.Event()
        follower = Client(self.daemon.socket, timeout=DEADLINE)

        def follow():
            for event in follower.subscribe(prefix="otp:", kinds=["lifecycle"]):
                seen.append((event.kind, event.name))
                if len(seen) == 1:
                    first.set()
                if event.name == "otp:b" and event.kind == "cancelled":
                    break
            done.set()
        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        for _ in range(DEADLINE * 100):
            if self.client.stats()["subscribers"] == 1:
                break
            threading.Event().wait(0.01)
        self.client.start("otp:a", "1h")
        self.client.start("sms:a", "1h")
        self.assertTrue(first.wait(DEADLINE))
        self.client.close()
        self.daemon.restart()
        self.client = Client(self.daemon.socket, timeout=DEADLINE)
        # Whether the follower is back yet or not: live, or replayed through SINCE.
        self.client.start("otp:b", "1h")
        self.client.cancel("otp:b")
        self.assertTrue(done.wait(DEADLINE * 2), "seen: %s" % seen)
        follower.close()
        self.assertEqual(seen, [("started", "otp:a"), ("started", "otp:b"), ("cancelled", "otp:b")])

    def test_gone_is_never_silent(self):
        """A `since` the daemon no longer keeps raises Gone: no events skipped without a word."""
        self.client.close()
        self.daemon.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory = tempfile.mkdtemp(prefix="cd-python-")
        self.daemon = Daemon(self.directory, extra=["--replay-events", "64"])
        self.client = Client(self.daemon.socket, timeout=DEADLINE)
        for index in range(100):
            self.client.start("g%d" % index, "1h")
        with self.assertRaises(countdownd.Gone):
            next(iter(self.client.subscribe(kinds=["lifecycle"], since=0)))

    def test_interrupted_calls_never_cross_replies(self):
        """A signal handler's exception may land anywhere inside a call (sending, waiting for the
        answer, taking a connection): that call's connection is closed, so no later call reads its
        answer. 5,000 calls of one thread, interrupted every 150 us of CPU."""
        class Interrupted(Exception):
            pass

        def interrupt(signum, frame):
            raise Interrupted()
        names = ["n%d" % i for i in range(40)]
        for name in names:
            self.client.start(name, "1h")
        client = Client(self.daemon.socket, timeout=DEADLINE, max_connections=2)
        crossed, answered, interrupted = [], 0, 0
        previous = signal.signal(signal.SIGPROF, interrupt)
        try:
            for index in range(5000):
                name = names[index % len(names)]
                try:
                    signal.setitimer(signal.ITIMER_PROF, 0.00015, 0.00015)
                    try:
                        got = client.status(name)
                    finally:
                        signal.setitimer(signal.ITIMER_PROF, 0)
                except Interrupted:
                    interrupted += 1
                    continue
                except countdownd.CountdowndError:
                    continue  # A pool place lost to an interrupt at the wrong instant: not a crossing.
                answered += 1
                if got.name != name:
                    crossed.append((name, got.name))
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.signal(signal.SIGPROF, previous)
            client.close()
        self.assertEqual(crossed, [], "answers read for another call")
        self.assertGreater(answered, 0)

    def test_interrupt_while_waiting_for_an_answer(self):
        """A signal handler's exception while the stalled daemon owes the answer: that connection
        is closed, and once the daemon goes on, the next call gets its own answer."""
        class Interrupted(Exception):
            pass

        def interrupt(signum, frame):
            raise Interrupted()
        self.client.start("first", "1h")
        previous = signal.signal(signal.SIGALRM, interrupt)
        self.daemon.process.send_signal(signal.SIGSTOP)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with self.assertRaises(Interrupted):
                self.client.start("second", "1h")  # Sent, then interrupted while it waits.
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            self.daemon.process.send_signal(signal.SIGCONT)
        self.assertEqual(self.client.status("first").name, "first")
        with self.assertRaises(Busy):
            self.client.start("first", "1h")

    def test_close_wakes_whoever_waits_for_a_connection(self):
        """With the one connection held by a call the stalled daemon does not answer, a second
        call waits for it; close() ends that wait at once with ConnectionLost."""
        client = Client(self.daemon.socket, timeout=DEADLINE, max_connections=1)
        outcomes = {}

        def call(key):
            try:
                client.status("nothing")
            except Exception as error:  # Reported below.
                outcomes[key] = error
        self.daemon.process.send_signal(signal.SIGSTOP)
        try:
            holder = threading.Thread(target=call, args=("holder",))
            holder.start()
            for _ in range(DEADLINE * 100):  # Until the holder has the one place.
                if client._in_use == 1:
                    break
                threading.Event().wait(0.01)
            waiter = threading.Thread(target=call, args=("waiter",))
            waiter.start()
            client.close()
            waiter.join(DEADLINE)
            self.assertFalse(waiter.is_alive(), "close() left a caller waiting for a connection")
            self.assertIsInstance(outcomes.get("waiter"), countdownd.ConnectionLost)
        finally:
            self.daemon.process.send_signal(signal.SIGCONT)
        holder.join(DEADLINE)
        self.assertIsInstance(outcomes.get("holder"), NotFound)

    def test_asyncio(self):
        async def scenario():
            client = await AsyncClient.connect(self.daemon.socket)
            async with client:
                await client.start("otp:+49", 60)
                try:
                    await client.start("otp:+49", 60)
                    self.fail("not busy")
                except Busy as busy:
                    self.assertTrue(0 < busy.remaining_ms <= 60_000)
                events = client.subscribe(["egg"], kinds=["lifecycle"])
                first = asyncio.ensure_future(events.__anext__())
                for _ in range(DEADLINE * 100):
                    if (await client.stats())["subscribers"] == 1:
                        break
                    await asyncio.sleep(0.01)
                await client.start("egg", "100ms")
                started = await asyncio.wait_for(first, DEADLINE)
                self.assertEqual((started.kind, started.name), ("started", "egg"))
                ended = await asyncio.wait_for(client.wait("egg"), DEADLINE)
                self.assertEqual(ended.state, "done")
                await events.aclose()
        asyncio.run(scenario())


class Parsing(unittest.TestCase):
    def test_error_fields(self):
        error = error_from("busy", "'a=b' is running with 0:00:58 left; wait for it remaining_ms=58000 state=running")
        self.assertIsInstance(error, Busy)
        self.assertEqual((error.remaining_ms, error.state), (58000, "running"))
        self.assertEqual(error.message, "'a=b' is running with 0:00:58 left; wait for it")
        unknown = error_from("new-code", "something")
        self.assertIsInstance(unknown, countdownd.CountdowndError)
        self.assertEqual(unknown.code, "new-code")

    def test_lines(self):
        snapshot = parse_line("EVENT 8 snapshot tea 2500 3000 running 1700000002500 1000 at extra")
        self.assertEqual((snapshot.kind, snapshot.state, snapshot.deadline_unix_ms, snapshot.owner_uid, snapshot.pinned),
                         ("snapshot", "running", 1700000002500, 1000, True))
        done = parse_line("EVENT 9 done tea 0 180000 57000")
        self.assertEqual((done.late_ms, done.is_lifecycle), (57000, True))
        self.assertFalse(parse_line("EVENT 9 tick tea 1000 180000").is_lifecycle)
        countdown = parse_line("COUNTDOWN tea paused 5000 6000 - 1000")
        self.assertEqual((countdown.state, countdown.deadline_unix_ms, countdown.owner_uid), ("paused", None, 1000))
        self.assertEqual(type(parse_line("NEWS from the future")).__name__, "Unknown")
        slept = parse_line("EVENT 12 resumed pomodoro 1440000 1500000 suspend")
        self.assertEqual((slept.kind, slept.suspend, parse_line("EVENT 13 paused tea 1000 5000").suspend), ("resumed", True, False))
        pomodoro = parse_line("COUNTDOWN pomodoro running 1440000 1500000 1700000002500 1000 - pause-on-suspend")
        self.assertEqual((pomodoro.pauses_on_suspend, pomodoro.pinned), (True, False))
        self.assertTrue(parse_line("EVENT 8 snapshot p 5 6 running 17 1000 pause-on-suspend").pauses_on_suspend)
        cycle = parse_line("COUNTDOWN p running 2500 3000 1700000002500 1000 - - phase=1/2 label=work round=1/4")
        self.assertEqual((cycle.phase, cycle.phases, cycle.label, cycle.round, cycle.rounds, cycle.late_ms), (1, 2, "work", 1, 4, None))
        phase = parse_line("EVENT 9 phase p 1000 1000 1500 phase=2/2 round=3")
        self.assertEqual((phase.kind, phase.late_ms, phase.phase, phase.label, phase.round, phase.rounds, phase.is_lifecycle),
                         ("phase", 1500, 2, None, 3, None, True))
        tick = parse_line("EVENT 8 tick p 2000 3000 - phase=1/2 label=work")
        self.assertEqual((tick.phase, tick.label, tick.late_ms), (1, "work", None))
        snapshot = parse_line("EVENT 8 snapshot p 2500 3000 running 17 1000 - phase=1/2 label=work")
        self.assertEqual((snapshot.phase, snapshot.label, snapshot.pinned), (1, "work", False))
        self.assertIsNone(parse_line("COUNTDOWN tea paused 5000 6000 - 1000").phase)
        changed = parse_line("EVENT 10 changed p 1000 1000 pause-on-suspend phase=2/2")
        self.assertEqual((changed.kind, changed.pauses_on_suspend, changed.phase, changed.is_lifecycle), ("changed", True, 2, True))
        self.assertFalse(parse_line("EVENT 11 changed p 1000 1000 count-on-suspend").pauses_on_suspend)

    def test_retry_after_never_raises(self):
        """The README's Retry-After: whole seconds rounded up, at least 1, also when a daemon gave no
        remaining_ms (where `-(-busy.remaining_ms // 1000)` raised TypeError)."""
        self.assertEqual(error_from("busy", "'a' is running remaining_ms=57814 state=running").retry_after_s, 58)
        self.assertEqual(error_from("busy", "'a' is running remaining_ms=1 state=running").retry_after_s, 1)
        self.assertEqual(error_from("busy", "'a' is running remaining_ms=0 state=running").retry_after_s, 1)
        self.assertEqual(error_from("busy", "'a' is running with 0:00:58 left").retry_after_s, 1)

    def test_no_argument_smuggles_a_second_request(self):
        """A newline in any argument would be read as a second request whose answer the next call
        takes: refused before anything is sent, whatever the argument."""
        from countdownd.protocol import BadRequest, encode_request, list_line, subscribe_line
        for line in ("EXTEND a 1ms\nPING", list_line(["running\nPING"]), subscribe_line(kinds=["done\rPING"]), "STATUS a\0b"):
            with self.assertRaises(BadRequest):
                encode_request(line)
        with self.assertRaises(BadRequest):
            encode_request("STATUS bad\udcff")  # A lone surrogate: no UTF-8 for it.
        for duration in ("1m\nSTATUS b", float("nan"), float("inf")):
            with self.assertRaises(BadDuration):
                countdownd.protocol.duration_text(duration)

    def test_every_failure_is_a_countdownd_error(self):
        from countdownd import ConnectionLost, CountdowndError, OutcomeUnknown, Timeout
        self.assertTrue(issubclass(Timeout, CountdowndError) and issubclass(Timeout, TimeoutError))
        # Catching ConnectionLost (nothing was carried out) must never catch a change that may have been.
        self.assertTrue(not issubclass(OutcomeUnknown, ConnectionLost) and OutcomeUnknown.maybe_applied)
        with self.assertRaises(ConnectionLost) as raised:
            Client(os.path.join(tempfile.gettempdir(), "no-such-countdownd.sock"), timeout=1)
        self.assertIn("start it with", str(raised.exception))


@unittest.skipUnless(shutil.which("pip") or shutil.which("pip3"), "pip is not installed here: the install check needs it")
class Installs(unittest.TestCase):
    def test_pip_install(self):
        target = tempfile.mkdtemp(prefix="cd-python-install-")
        # From a copy: a build leaves build/ and *.egg-info beside the sources.
        source = os.path.join(target, "source")
        shutil.copytree(os.path.dirname(HERE), source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        target = os.path.join(target, "installed")
        try:
            built = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                                    "--target", target, source], timeout=300, capture_output=True, text=True,
                                   env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
            if built.returncode != 0 and ("NewConnectionError" in built.stderr or "No matching distribution found for setuptools" in built.stderr):
                self.skipTest("pip cannot fetch setuptools to build the package (no network to PyPI here)")
            self.assertEqual(built.returncode, 0, built.stderr)
            out = subprocess.run([sys.executable, "-c", "import countdownd, sys; print(countdownd.__file__)"],
                                 env=dict(os.environ, PYTHONPATH=target), capture_output=True, text=True, check=True, cwd=target)
            self.assertTrue(out.stdout.strip().startswith(target), out.stdout)
            self.assertTrue(os.path.exists(os.path.join(target, "countdownd", "py.typed")),
                            "py.typed is installed, so type checkers read the library's annotations")
        finally:
            shutil.rmtree(os.path.dirname(target), ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
