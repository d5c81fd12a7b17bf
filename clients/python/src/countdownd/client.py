"""The blocking client: one connection to countdownd, one request at a time."""
from __future__ import annotations

import socket
import time
from collections import deque
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from .protocol import (
    FINAL_KINDS, how_it_ended, BadRequest, ConnectionLost, Countdown, CountdowndError, Err, Event, Gone, Hello, NotFound, Ok,
    Overflow, ProtocolViolation, Resync, Shutdown, Stat, check_name, default_socket_path, duration_text,
    list_line, parse_line, start_line, stat_value, subscribe_line, subscribed_seq,
)


_DEFAULT = object()  # The connection's own timeout.


def _cannot_connect(path: str, error: OSError) -> ConnectionLost:
    return ConnectionLost(
        "cannot connect to countdownd at %s (%s); start it with 'systemctl --user start countdownd.socket' "
        "or run 'countdownd', or pass the socket path it listens on" % (path, error.strerror or error))


class Client:
    """A connection to countdownd.

    >>> with Client() as client:
    ...     try:
    ...         client.start("otp:+4915112345678", 60)
    ...     except Busy as busy:
    ...         print("Resend code in %d s" % -(-busy.remaining_ms // 1000))

    Every method sends one request and returns its answer, or raises the error the daemon
    answered (`Busy`, `NotFound`, … all `CountdowndError`), `ConnectionLost` when the daemon is
    gone. `subscribe` and `wait` open connections of their own, so this one stays free for requests.
    """

    def __init__(self, socket_path: Optional[str] = None, timeout: Optional[float] = 30.0):
        self.socket_path = socket_path or default_socket_path()
        self.timeout = timeout
        self.daemon_version: Optional[str] = None
        self._sock: Optional[socket.socket] = None
        self._buffer = b""
        self._events: deque = deque()
        self._connect()

    # Connection

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError as error:
            sock.close()
            raise _cannot_connect(self.socket_path, error) from None
        self._sock, self._buffer = sock, b""
        greeting = parse_line(self._read_line())
        if isinstance(greeting, Err):
            self.close()
            raise greeting.error
        if not isinstance(greeting, Hello):
            self.close()
            raise ProtocolViolation("expected countdownd's HELLO greeting; is %s countdownd's socket?" % self.socket_path)
        self.daemon_version = greeting.daemon_version

    def close(self) -> None:
        """Closes the connection (idempotent)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read_line(self, timeout=_DEFAULT) -> str:
        """One line; `timeout` seconds (None: forever; by default the connection's) or
        `socket.timeout`."""
        if self._sock is None:
            raise ConnectionLost("the connection is closed")
        while b"\n" not in self._buffer:
            try:
                self._sock.settimeout(self.timeout if timeout is _DEFAULT else timeout)
                chunk = self._sock.recv(65536)
            except socket.timeout:
                raise
            except OSError as error:
                self.close()
                raise ConnectionLost("lost the connection to countdownd (%s)" % (error.strerror or error)) from None
            if not chunk:
                self.close()
                raise ConnectionLost("countdownd closed the connection")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode("utf-8", "replace")

    def _request(self, line: str) -> Tuple[List[Countdown], Dict[str, object], str]:
        """Sends one request; returns its COUNTDOWN lines, STAT lines and OK text. Events that
        arrive meanwhile (on a subscribed connection) are kept for `next_event`."""
        if self._sock is None:
            raise ConnectionLost("the connection is closed")
        try:
            self._sock.sendall(line.encode() + b"\n")
        except OSError as error:
            self.close()
            raise ConnectionLost("lost the connection to countdownd (%s)" % (error.strerror or error)) from None
        countdowns: List[Countdown] = []
        stats: Dict[str, object] = {}
        while True:
            parsed = parse_line(self._read_line())
            if isinstance(parsed, Event):
                self._events.append(parsed)
            elif isinstance(parsed, Countdown):
                countdowns.append(parsed)
            elif isinstance(parsed, Stat):
                stats[parsed.key] = stat_value(parsed.value)
            elif isinstance(parsed, Ok):
                return countdowns, stats, parsed.text
            elif isinstance(parsed, Err):
                raise parsed.error
            # SHUTDOWN, RESYNC and unknown lines are not a reply; the connection ending says the rest.

    def _change(self, line: str) -> Countdown:
        _, _, text = self._request(line)
        countdown = parse_line("COUNTDOWN " + text)
        if not isinstance(countdown, Countdown):
            raise ProtocolViolation("unexpected answer to %s: OK %s" % (line.split()[0], text))
        return countdown

    # Requests

    def start(self, name: str, duration=None, *, at=None, replace: bool = False,
              pause_on_suspend: bool = False) -> Countdown:
        """Starts a countdown: `duration` in seconds (int or float) or as text ('5m', '1500ms');
        60 s when neither it nor `at` (Unix ms, or an aware datetime) is given. Raises `Busy`
        (with `remaining_ms`) while one of that name runs, unless `replace`. With
        `pause_on_suspend` it stands still while the machine sleeps (a pomodoro)."""
        return self._change(start_line(name, duration, at, replace, pause_on_suspend))

    def status(self, name: str) -> Countdown:
        """The countdown's state now; `NotFound` when there is none of that name."""
        countdowns, _, _ = self._request("STATUS " + check_name(name))
        if not countdowns:
            raise ProtocolViolation("STATUS answered OK without a countdown")
        return countdowns[0]

    def list(self, states: Optional[Iterable[str]] = None, prefix: Optional[str] = None) -> List[Countdown]:
        """Every countdown this user may see, optionally of some states or a name prefix."""
        countdowns, _, _ = self._request(list_line(states, prefix))
        return countdowns

    def cancel(self, name: str) -> Countdown:
        return self._change("CANCEL " + check_name(name))

    def pause(self, name: str) -> Countdown:
        return self._change("PAUSE " + check_name(name))

    def resume(self, name: str) -> Countdown:
        return self._change("RESUME " + check_name(name))

    def extend(self, name: str, duration) -> Countdown:
        """Adds time to a running or paused countdown."""
        return self._change("EXTEND %s %s" % (check_name(name), duration_text(duration)))

    def remove(self, name: str) -> Countdown:
        """Forgets a finished countdown now (its name and its place under the limits are free)."""
        return self._change("REMOVE " + check_name(name))

    def ping(self) -> None:
        self._request("PING")

    def stats(self) -> Dict[str, object]:
        """The daemon's figures (root: the whole daemon's; anyone else: their own)."""
        _, stats, _ = self._request("STATS")
        return stats

    # Waiting and following

    def wait(self, name: str, timeout: Optional[float] = None) -> Countdown:
        """Blocks until the countdown is finished and returns how it ended (state `done`, with
        `late_ms` if it was late, or `cancelled`). Survives a daemon restart: it reconnects.
        Raises `NotFound` if there is none of that name (or it is removed first),
        `TimeoutError` after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> Optional[float]:
            if deadline is None:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("'%s' did not finish within %s s" % (name, timeout))
            return remaining
        delay = 0.05
        while True:
            budget = left()
            try:
                follower = Client(self.socket_path, timeout=self.timeout if budget is None else min(self.timeout or budget, budget))
            except ConnectionLost:
                time.sleep(min(delay, left() or delay))
                delay = min(delay * 2, 2.0)
                continue
            try:
                # Subscribed first, then asked: a `done` between the two cannot be missed. With
                # snapshots: in cluster mode a RESYNC comes with a snapshot of each followed
                # countdown, finished ones too, which may be the only word of its end.
                follower._request(subscribe_line([name], kinds=FINAL_KINDS + ("snapshot",)))
                current = follower.status(name)
                if current.is_finished:
                    return current
                while True:
                    try:
                        event = follower.next_event(timeout=left())
                    except socket.timeout:
                        left()
                        continue
                    ended = how_it_ended(event, current)
                    if ended is not None:
                        return ended
            except socket.timeout:
                left()  # Raises TimeoutError once the time is up; else a slow reply: again.
                continue
            except ConnectionLost:
                delay = 0.05
                continue
            finally:
                follower.close()

    def subscribe(self, names: Optional[Iterable[str]] = None, prefix: Optional[str] = None,
                  kinds: Optional[Iterable[str]] = None, since: Optional[int] = None,
                  reconnect: bool = True) -> Iterator[Event]:
        """Yields events, on a connection of its own: of `names`, of every countdown whose name
        starts with `prefix`, or of everything (neither). `kinds` limits them ('done',
        'lifecycle', 'tick', …; by default all, with a `snapshot` of each running or paused one
        first); `since` replays the lifecycle events after that `seq` instead of snapshots.

        With `reconnect`, a lost connection (a daemon restart) is taken up again with `SINCE`
        the last lifecycle event seen, so none is missed or repeated; if the daemon no longer
        keeps that far back, it subscribes afresh and the current state comes as snapshots."""
        names = list(names or [])
        last_seq = since
        delay = 0.05
        resumed = False  # True once a connection was lost and is being taken up again.
        wants_snapshots = kinds is None or bool({"snapshot", "all"} & set(kinds))
        while True:
            try:
                follower = Client(self.socket_path, timeout=self.timeout)
            except ConnectionLost:
                if not reconnect:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            try:
                try:
                    _, _, text = follower._request(subscribe_line(names, prefix, kinds, last_seq))
                except (Gone, BadRequest):
                    # Not kept that far back, or a daemon whose history never had it (its state
                    # was replaced): afresh, the current state as snapshots; but only on a
                    # reconnect, and only where snapshots were asked for, so that a gap is
                    # never silent. The caller's own `since` is answered as the daemon answers.
                    if not reconnect or last_seq is None or not resumed or not wants_snapshots:
                        raise
                    _, _, text = follower._request(subscribe_line(names, prefix, kinds, None))
                    last_seq = None
                if last_seq is None:
                    last_seq = subscribed_seq(text)
                while True:
                    event = follower.next_event()
                    if event.is_lifecycle:
                        last_seq = event.seq
                    yield event
            except (ConnectionLost, Overflow):
                # Overflow: it fell too far behind and was cut off; SINCE brings what it missed.
                if not reconnect:
                    raise
                resumed = True
            finally:
                follower.close()

    def next_event(self, timeout: Optional[float] = None) -> Event:
        """The next event on this connection (after a SUBSCRIBE sent through it); `timeout`
        seconds (None: forever) or `socket.timeout`."""
        if self._events:
            return self._events.popleft()
        while True:
            parsed = parse_line(self._read_line(timeout))
            if isinstance(parsed, Event):
                return parsed
            if isinstance(parsed, Err):
                raise parsed.error
