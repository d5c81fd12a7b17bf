"""The blocking client: a small pool of connections to countdownd, safe to share between threads."""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from .connection import Connection, NotSent, seconds_left
from .protocol import (
    FINAL_KINDS, how_it_ended, BadRequest, ConnectionLost, Countdown, Event, Gone, Overflow, ProtocolViolation, Timeout,
    check_name, default_socket_path, duration_text, encode_request, list_line, parse_line, start_line, subscribe_line,
    subscribed_seq,
)


_DEFAULT: Any = object()  # The client's own timeout.

_FIRST_RETRY_S = 0.01  # Back-off between attempts to reach a daemon that is away: doubled each
_LAST_RETRY_S = 0.5    # time up to this, so a restarted daemon is found within half a second.


class Client:
    """A client of countdownd, safe to share between threads.

    >>> with Client() as client:
    ...     try:
    ...         client.start("otp:+4915112345678", 60)
    ...     except Busy as busy:
    ...         print("Resend code in %d s" % busy.retry_after_s)

    Every method sends one request and returns its answer, or raises the error the daemon
    answered (`Busy`, `NotFound`, … all `CountdowndError`). Requests go over a small pool of
    connections (at most `max_connections`; a thread waits for a free one), each used by one
    thread at a time, so threads never read each other's answers.

    Failures, each a `CountdowndError`:
    - `Timeout` (also a `TimeoutError`): no answer within `timeout` seconds (the client's, or
      the call's own). The connection is closed, never reused with an answer in flight.
    - `OutcomeUnknown`: a change was sent and the connection broke before its answer: it may or
      may not have been made. Never retried by the library; reads are retried.
    - `ConnectionLost`: the daemon could not be reached within the timeout. A daemon that is
      restarting is waited for (attempts back off to one every 0.5 s), so a restart costs a
      slow call, not a failed one.

    `subscribe` and `wait` open connections of their own.
    """

    def __init__(self, socket_path: Optional[str] = None, timeout: Optional[float] = 30.0, max_connections: int = 8):
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.socket_path = socket_path or default_socket_path()
        self.timeout = timeout
        self.max_connections = max_connections
        self.daemon_version: Optional[str] = None
        self._idle: List[Connection] = []
        self._in_use = 0
        self._closed = False
        # Entered as the plain lock (`with self._lock`), whose enter and exit are one C call each:
        # an exception from a signal handler cannot land between taking it and the block.
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        # Reached once at construction, so a wrong path or a stopped daemon is said at once.
        first = self._connect(self._deadline(_DEFAULT), _DEFAULT, wait_for_daemon=False)
        self._idle.append(first)

    # Connections

    def _deadline(self, timeout: Any) -> Optional[float]:
        seconds = self.timeout if timeout is _DEFAULT else timeout
        return None if seconds is None else time.monotonic() + seconds

    def _connect(self, deadline: Optional[float], timeout: Any, wait_for_daemon: bool = True) -> Connection:
        """A new connection, trying again with a growing pause while the daemon is away (until
        `deadline`) when `wait_for_daemon`."""
        delay = _FIRST_RETRY_S
        while True:
            try:
                connection = Connection(self.socket_path, deadline)
                self.daemon_version = connection.daemon_version
                return connection
            except ConnectionLost as error:
                left = seconds_left(deadline)
                if not wait_for_daemon:
                    raise
                if left is not None and left <= 0:
                    raise ConnectionLost("%s; gave up after the call's timeout of %s s"
                                         % (error.message, self.timeout if timeout is _DEFAULT else timeout)) from None
                time.sleep(delay if left is None else min(delay, left))  # The last try is at the deadline.
                delay = min(delay * 2, _LAST_RETRY_S)

    def _take_slot(self, deadline: Optional[float]) -> None:
        """Waits, holding the lock, for room in the pool, then counts a place in `_in_use`."""
        while True:
            if self._closed:
                raise ConnectionLost("the client is closed")
            if self._in_use < self.max_connections:
                self._in_use += 1
                return
            left = seconds_left(deadline)
            if left is not None and left <= 0:
                raise Timeout("all %d connections stayed busy for the call's timeout" % self.max_connections)
            self._room.wait(left)

    def _idle_connection(self) -> Optional[Connection]:
        """An idle connection still open, holding the lock; None when there is none."""
        while self._idle:
            connection = self._idle.pop()
            if connection.is_idle_and_open():
                return connection
            connection.close()  # The daemon said goodbye while it sat in the pool.
        return None

    def _give_back(self, connection: Optional[Connection]) -> None:
        with self._lock:
            self._in_use -= 1
            if connection is not None and connection.is_open:
                if self._closed:
                    connection.close()
                else:
                    self._idle.append(connection)
            self._room.notify()

    def _request(self, line: str, is_change: bool, timeout: Any = _DEFAULT) -> Tuple[List[Countdown], Dict[str, object], str]:
        """Sends one request on a pooled connection; returns its COUNTDOWN lines, STAT lines
        and OK text. A request that never reached the daemon is sent again on a fresh
        connection; a read whose connection broke is asked again; a change is not."""
        encode_request(line)  # A line that cannot be sent is refused before it takes a connection.
        deadline = self._deadline(timeout)
        pause = 0.0
        while True:
            connection = None
            holds_slot = False
            try:
                with self._lock:
                    self._take_slot(deadline)
                    # Straight after the count, with no call between: an exception from a signal
                    # handler lands before both or after both, and `finally` gives the place back.
                    holds_slot = True
                    connection = self._idle_connection()
                if connection is None:
                    connection = self._connect(deadline, timeout)
                return connection.request(line, deadline, is_change)
            except NotSent:
                # The daemon had closed this connection (a restart): nothing ran. A daemon that
                # closes every connection at once is asked again with a growing pause, not in a loop.
                left = seconds_left(deadline)
                if left is not None and left <= 0:
                    raise
                time.sleep(pause if left is None else min(pause, left))
                pause = min(pause * 2 + _FIRST_RETRY_S, _LAST_RETRY_S)
                continue
            except ConnectionLost:
                if is_change or (deadline is not None and time.monotonic() >= deadline) or self._closed:
                    raise
                continue  # A read: asking again is harmless.
            finally:
                if holds_slot:
                    self._give_back(connection)

    def close(self) -> None:
        """Closes every connection (idempotent); calls after it raise `ConnectionLost`."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._room.notify_all()  # Whoever waits for a connection learns it is closed.
        for connection in idle:
            connection.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _change(self, line: str, timeout: Any) -> Countdown:
        _, _, text = self._request(line, True, timeout)
        countdown = parse_line("COUNTDOWN " + text)
        if not isinstance(countdown, Countdown):
            raise ProtocolViolation("unexpected answer to %s: OK %s" % (line.split()[0], text))
        return countdown

    # Requests

    def start(self, name: str, duration: Union[int, float, str, None] = None, *, at: Any = None, replace: bool = False,
              pause_on_suspend: Optional[bool] = None, cycle: Any = None, repeat: Union[int, bool, None] = None,
              timeout: Any = _DEFAULT) -> Countdown:
        """Starts a countdown: `duration` in seconds (int or float) or as text ('5m', '1500ms');
        60 s when neither it nor `at` (Unix ms, or an aware datetime) is given. Raises `Busy`
        (with `remaining_ms` and `retry_after_s`) while one of that name runs, unless `replace`.
        `pause_on_suspend=True`: it stands still while the machine sleeps (a pomodoro); False: it
        counts on; None (the default): a name started again keeps its setting, a new one counts on.
        `cycle`: a cycle of phases run one after the other (a pomodoro), as a list of durations or
        `(duration, label)` pairs, or as text ('25m:work,5m:break'); `repeat` runs it that many
        rounds, or for ever with True. The countdown returned is its first phase's, with `phase`,
        `phases`, `label`, `round` and `rounds` set."""
        return self._change(start_line(name, duration, at, replace, pause_on_suspend, cycle, repeat), timeout)

    def status(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        """The countdown's state now; `NotFound` when there is none of that name."""
        countdowns, _, _ = self._request("STATUS " + check_name(name), False, timeout)
        if not countdowns:
            raise ProtocolViolation("STATUS answered OK without a countdown")
        return countdowns[0]

    def list(self, states: Optional[Iterable[str]] = None, prefix: Optional[str] = None, *,
             timeout: Any = _DEFAULT) -> List[Countdown]:
        """Every countdown this user may see, optionally of some states or a name prefix."""
        countdowns, _, _ = self._request(list_line(states, prefix), False, timeout)
        return countdowns

    def cancel(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        """Cancels a running or paused countdown (`NotFound` if there is none, or it finished)."""
        return self._change("CANCEL " + check_name(name), timeout)

    def pause(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        """Pauses a running countdown (`Busy` if it is paused already)."""
        return self._change("PAUSE " + check_name(name), timeout)

    def resume(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        """Resumes a paused countdown (`Busy` if it is running)."""
        return self._change("RESUME " + check_name(name), timeout)

    def extend(self, name: str, duration: Union[int, float, str], *, timeout: Any = _DEFAULT) -> Countdown:
        """Adds time to a running or paused countdown."""
        return self._change("EXTEND %s %s" % (check_name(name), duration_text(duration)), timeout)

    def set_pause_on_suspend(self, name: str, pause: bool, *, timeout: Any = _DEFAULT) -> Countdown:
        """`SET <name> ON-SUSPEND pause|count`: whether a running or paused countdown stands still
        while the machine sleeps, changed without restarting it."""
        return self._change("SET %s ON-SUSPEND %s" % (check_name(name), "pause" if pause else "count"), timeout)

    def skip(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        """Ends a cycle's running phase now and starts the next (`BadRequest` for a plain
        countdown); after the last phase the cycle is done."""
        return self._change("SKIP " + check_name(name), timeout)

    def remove(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        """Forgets a finished countdown now (its name and its place under the limits are free)."""
        return self._change("REMOVE " + check_name(name), timeout)

    def ping(self, *, timeout: Any = _DEFAULT) -> None:
        """Asks the daemon for `OK pong`."""
        self._request("PING", False, timeout)

    def stats(self, *, timeout: Any = _DEFAULT) -> Dict[str, object]:
        """The daemon's figures (root: the whole daemon's; anyone else: their own)."""
        _, stats, _ = self._request("STATS", False, timeout)
        return stats

    # Waiting and following

    def wait(self, name: str, timeout: Optional[float] = None) -> Countdown:
        """Blocks until the countdown is finished and returns how it ended (state `done`, with
        `late_ms` if it was late, or `cancelled`). Survives a daemon restart: it reconnects.
        Raises `NotFound` if there is none of that name (or it is removed first), `Timeout`
        (a `TimeoutError`) after `timeout` seconds (None: as long as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                follower = self._connect(deadline, timeout)
            except ConnectionLost:
                if deadline is not None and time.monotonic() >= deadline:
                    raise Timeout("'%s' did not finish within %s s (and countdownd could not be reached)" % (name, timeout)) from None
                raise
            try:
                # Subscribed first, then asked: a `done` between the two cannot be missed. With
                # snapshots: in cluster mode a RESYNC comes with a snapshot of each followed
                # countdown, finished ones too, which may be the only word of its end.
                follower.request(subscribe_line([name], kinds=FINAL_KINDS + ("snapshot",)), deadline, False)
                countdowns, _, _ = follower.request("STATUS " + check_name(name), deadline, False)
                if not countdowns:
                    raise ProtocolViolation("STATUS answered OK without a countdown")
                current = countdowns[0]
                if current.is_finished:
                    return current
                while True:
                    ended = how_it_ended(follower.next_event(deadline), current)
                    if ended is not None:
                        return ended
            except Timeout:
                raise Timeout("'%s' did not finish within %s s" % (name, timeout)) from None
            except ConnectionLost:
                continue  # A daemon restart: follow it again (SUBSCRIBE, then STATUS).
            finally:
                follower.close()

    def subscribe(self, names: Optional[Iterable[str]] = None, prefix: Optional[str] = None,
                  kinds: Optional[Iterable[str]] = None, since: Optional[int] = None,
                  reconnect: bool = True, timeout: Optional[float] = None) -> Iterator[Event]:
        """Yields events, on a connection of its own: of `names`, of every countdown whose name
        starts with `prefix`, or of everything (neither). `kinds` limits them ('done',
        'lifecycle', 'tick', …; by default all, with a `snapshot` of each running or paused one
        first); `since` replays the lifecycle events after that `seq` instead of snapshots.

        With `reconnect`, a lost connection (a daemon restart) is taken up again with `SINCE`
        the last lifecycle event seen, so none is missed or repeated; if the daemon no longer
        keeps that far back, it subscribes afresh and the current state comes as snapshots.
        `timeout` bounds each wait for the next event, reconnecting included: `Timeout` after
        that many seconds without one (None: as long as it takes)."""
        names = list(names or [])
        last_seq = since
        resumed = False  # True once a connection was lost and is being taken up again.
        wants_snapshots = kinds is None or bool({"snapshot", "all"} & set(kinds))

        def next_deadline() -> Optional[float]:
            return None if timeout is None else time.monotonic() + timeout
        deadline = next_deadline()
        while True:
            try:
                follower = self._connect(deadline, timeout, wait_for_daemon=reconnect)
            except ConnectionLost:
                if deadline is not None and time.monotonic() >= deadline:
                    raise Timeout("no event within %s s: countdownd could not be reached" % timeout) from None
                raise
            try:
                try:
                    _, _, text = follower.request(subscribe_line(names, prefix, kinds, last_seq), deadline, False)
                except (Gone, BadRequest):
                    # Not kept that far back, or a daemon whose history never had it (its state
                    # was replaced): afresh, the current state as snapshots; but only on a
                    # reconnect, and only where snapshots were asked for, so that a gap is
                    # never silent. The caller's own `since` is answered as the daemon answers.
                    if not reconnect or last_seq is None or not resumed or not wants_snapshots:
                        raise
                    _, _, text = follower.request(subscribe_line(names, prefix, kinds, None), deadline, False)
                    last_seq = None
                if last_seq is None:
                    last_seq = subscribed_seq(text)
                while True:
                    try:
                        event = follower.next_event(deadline)
                    except Timeout:
                        raise Timeout("no event within %s s" % timeout) from None
                    if event.is_lifecycle:
                        last_seq = event.seq
                    yield event
                    deadline = next_deadline()
            except (ConnectionLost, Overflow):
                # Overflow: it fell too far behind and was cut off; SINCE brings what it missed.
                if not reconnect:
                    raise
                resumed = True
            finally:
                follower.close()
