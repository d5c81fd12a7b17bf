"""The asyncio client: the same requests as `Client`, awaited, pipelined on one connection."""
from __future__ import annotations

import asyncio
import select
from collections import deque
from typing import Any, AsyncIterator, Awaitable, Callable, Deque, Dict, Iterable, List, Optional, Tuple, TypeVar, Union

from .connection import cannot_connect
from .protocol import (
    FINAL_KINDS, how_it_ended, BadRequest, ConnectionLost, Countdown, CountdowndError, Err, Event, Gone, Hello, Ok,
    OutcomeUnknown, Overflow, ProtocolViolation, ReplyBlock, Shutdown, Stat, Timeout, check_name, default_socket_path,
    duration_text, encode_request, list_line, parse_line, start_line, subscribe_line, subscribed_seq,
)

_DEFAULT: Any = object()  # The client's own timeout.
_FIRST_RETRY_S = 0.01
_LAST_RETRY_S = 0.5
_WRITE_HIGH_WATER = 64 * 1024  # Past this much unsent, a caller waits for the socket to drain.

Reply = Tuple[List[Countdown], Dict[str, object], str]
_Connected = TypeVar("_Connected")


async def _reach(attempt: Callable[[Optional[float]], Awaitable[_Connected]], deadline: Optional[float],
                 wait_for_daemon: bool, stop: Callable[[], bool] = lambda: False) -> _Connected:
    """`attempt(seconds left)` until it connects, trying again after `ConnectionLost` with a
    growing pause (10 ms up to 0.5 s) while the daemon is away, the last try at `deadline`; the
    pipeline's and the followers' one way of waiting for a daemon."""
    loop = asyncio.get_running_loop()
    delay = _FIRST_RETRY_S
    while True:
        left = None if deadline is None else max(0.0, deadline - loop.time())
        try:
            return await attempt(left)
        except ConnectionLost as error:
            left = None if deadline is None else deadline - loop.time()
            if not wait_for_daemon or stop():
                raise
            if left is not None and left <= 0:
                raise ConnectionLost("%s; gave up after the call's timeout" % error.message) from None
            await asyncio.sleep(delay if left is None else min(delay, left))
            delay = min(delay * 2, _LAST_RETRY_S)


class _Pending:
    """One request sent and not yet answered: the lines of its reply gathered so far."""

    def __init__(self, future: "asyncio.Future[Reply]"):
        self.future = future
        self.block = ReplyBlock()


class _Pipeline:
    """One connection and its only reader: replies are matched to requests by order. Once it is
    broken (the daemon left, or a caller gave up on an answer still due), every request in
    flight fails and it is never written to again."""

    def __init__(self, path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.path = path
        self.daemon_version: Optional[str] = None
        self._reader, self._writer = reader, writer
        self._pending: Deque[_Pending] = deque()
        self._broken: Optional[str] = None
        self._shutdown_reason: Optional[str] = None
        self._drain_lock = asyncio.Lock()
        self._reading: Optional["asyncio.Task[None]"] = None

    @classmethod
    async def open(cls, path: str, timeout: Optional[float]) -> "_Pipeline":
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), timeout)
        except asyncio.TimeoutError:
            raise cannot_connect(path, "no answer to the connection") from None
        except OSError as error:
            raise cannot_connect(path, error.strerror or str(error)) from None
        pipeline = cls(path, reader, writer)
        try:
            line = await asyncio.wait_for(reader.readline(), timeout)
        except asyncio.TimeoutError:
            pipeline._abort("no greeting")
            raise Timeout("countdownd at %s accepted the connection but sent no greeting within the call's timeout" % path) from None
        except (OSError, asyncio.IncompleteReadError, ValueError) as error:
            pipeline._abort("no greeting")
            raise ConnectionLost("lost the connection to countdownd (%s)" % error) from None
        except BaseException:
            pipeline._abort("cancelled while connecting")
            raise
        if not line.endswith(b"\n"):
            pipeline._abort("no greeting")  # A daemon stopping as it accepted: try again.
            raise ConnectionLost("countdownd at %s closed the connection before its greeting" % path)
        greeting = parse_line(line.rstrip(b"\r\n").decode("utf-8", "replace"))
        if isinstance(greeting, Err):
            pipeline._abort("refused")
            raise greeting.error
        if not isinstance(greeting, Hello):
            pipeline._abort("not countdownd")
            raise ProtocolViolation("expected countdownd's HELLO greeting; is %s countdownd's socket?" % path)
        pipeline.daemon_version = greeting.daemon_version
        pipeline._reading = asyncio.ensure_future(pipeline._read_replies())
        return pipeline

    @property
    def is_usable(self) -> bool:
        return self._broken is None

    def send(self, data: bytes) -> _Pending:
        """Writes a request's bytes and returns its place in line; in one step, so the order of
        writes is the order of replies whichever tasks share the pipeline. Raises
        `ConnectionLost` when the connection is known to be ending: nothing was sent."""
        if self._broken is None and (self._writer.transport.is_closing() or (not self._pending and self._said_goodbye())):
            self._abort("countdownd closed the connection")
        if self._broken is not None:
            raise ConnectionLost("the connection is closed (%s)" % self._broken)
        pending = _Pending(asyncio.get_running_loop().create_future())
        self._pending.append(pending)
        self._writer.write(data)
        return pending

    def _said_goodbye(self) -> bool:
        """For an idle pipeline: nothing arrives unasked but the daemon's goodbye (SHUTDOWN, then
        the end), which the reader may not have run to see yet (a restart while the loop was
        busy). A look at the socket, without reading."""
        if self._reader._buffer:  # noqa: SLF001 (bytes read and not yet parsed: unasked, so a goodbye)
            return True
        sock = self._writer.get_extra_info("socket")
        if sock is None:
            return False
        poller = select.poll()
        try:
            poller.register(sock.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return False

    async def drain_if_needed(self, timeout: Optional[float]) -> bool:
        """Waits, within `timeout`, while more than the high-water mark is unsent; False when
        the time ran out first."""
        transport = self._writer.transport
        if transport.get_write_buffer_size() <= _WRITE_HIGH_WATER:
            return True
        try:
            async with self._drain_lock:  # One drainer at a time (older asyncio asserts it).
                await asyncio.wait_for(self._writer.drain(), timeout)
        except asyncio.TimeoutError:
            return False
        except (OSError, ConnectionError):
            pass  # The reader sees the same end and fails what is in flight.
        return True

    async def _read_replies(self) -> None:
        why = "countdownd closed the connection"
        try:
            while True:
                raw = await self._reader.readline()
                if not raw.endswith(b"\n"):
                    if self._shutdown_reason:
                        why = "countdownd is stopping (%s)" % self._shutdown_reason
                    break
                parsed = parse_line(raw.rstrip(b"\r\n").decode("utf-8", "replace"))
                if isinstance(parsed, Shutdown):
                    self._shutdown_reason = parsed.reason
                    continue
                if not self._pending or not isinstance(parsed, (Countdown, Stat, Ok, Err)):
                    continue  # Events are not asked for here; unknown lines are ignored.
                head = self._pending[0]
                try:
                    text = head.block.take(parsed)
                except CountdowndError as refusal:
                    self._pending.popleft()
                    if not head.future.done():  # Done: its caller gave up; the pipeline is closing.
                        head.future.set_exception(refusal)
                    continue
                if text is not None:
                    self._pending.popleft()
                    if not head.future.done():
                        head.future.set_result((head.block.countdowns, head.block.stats, text))
        except (OSError, asyncio.IncompleteReadError, ValueError) as error:
            why = "lost the connection to countdownd (%s)" % error
        except asyncio.CancelledError:
            why = self._broken or "the client was closed"
        self._abort(why)

    def _abort(self, why: str) -> None:
        """Breaks the pipeline: closes the socket and fails every request still in flight with
        `OutcomeUnknown` (each may or may not have been carried out)."""
        if self._broken is None:
            self._broken = why
        # abort(), not close(): close() waits to send what is buffered, and a stopped daemon
        # would keep every task blocked in drain() with it.
        self._writer.transport.abort()
        while self._pending:
            pending = self._pending.popleft()
            if not pending.future.done():
                pending.future.set_exception(OutcomeUnknown(
                    "%s before this request's answer came: it may or may not have been carried out" % self._broken))
                pending.future.add_done_callback(_retrieved)
        if self._reading is not None and self._reading is not asyncio.current_task():
            self._reading.cancel()

    def abandon(self, why: str) -> None:
        """A caller gave up on an answer still due: it may never be read as another's."""
        self._abort(why)

    async def close(self) -> None:
        self._abort("the client was closed")
        try:
            await self._writer.wait_closed()
        except (OSError, asyncio.CancelledError):
            pass  # Closed either way.


def _retrieved(future: "asyncio.Future[Any]") -> None:
    if not future.cancelled():
        future.exception()  # Marks a failure nobody awaits as seen, so asyncio does not log it.


class AsyncClient:
    """A client of countdownd for asyncio programs, safe to share between tasks.

    >>> async with await AsyncClient.connect() as client:
    ...     countdown = await client.start("tea", "3m")

    Requests from every task are pipelined on one connection and answered in order. A call
    that times out or is cancelled (`asyncio.wait_for`, a task's `cancel()`) closes that
    connection at once, since its answer is still due: the other requests in flight on it fail
    with `OutcomeUnknown` (reads among them are asked again), and the next call connects
    afresh. Errors are those of `Client`; `subscribe` and `wait` use connections of their own.
    """

    def __init__(self, socket_path: Optional[str] = None, timeout: Optional[float] = 30.0):
        self.socket_path = socket_path or default_socket_path()
        self.timeout = timeout
        self.daemon_version: Optional[str] = None
        self._pipeline: Optional[_Pipeline] = None
        self._connecting: Optional["asyncio.Future[_Pipeline]"] = None
        self._closed = False

    @classmethod
    async def connect(cls, socket_path: Optional[str] = None, timeout: Optional[float] = 30.0) -> "AsyncClient":
        """A client whose first connection is made now, so a wrong path or a stopped daemon is
        said at once (`ConnectionLost`)."""
        client = cls(socket_path, timeout)
        client._pipeline = await _Pipeline.open(client.socket_path, timeout)
        client.daemon_version = client._pipeline.daemon_version
        return client

    async def close(self) -> None:
        """Closes the connection (idempotent); calls after it raise `ConnectionLost`."""
        self._closed = True
        if self._pipeline is not None:
            await self._pipeline.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # Connections

    def _deadline(self, timeout: Any) -> Optional[float]:
        seconds = self.timeout if timeout is _DEFAULT else timeout
        return None if seconds is None else asyncio.get_running_loop().time() + seconds

    def _left(self, deadline: Optional[float]) -> Optional[float]:
        return None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())

    async def _open(self, deadline: Optional[float], wait_for_daemon: bool = True) -> _Pipeline:
        """A new connection, trying again with a growing pause while the daemon is away."""
        pipeline = await _reach(lambda left: _Pipeline.open(self.socket_path, left), deadline,
                                wait_for_daemon, stop=lambda: self._closed)
        self.daemon_version = pipeline.daemon_version
        return pipeline

    async def _usable_pipeline(self, deadline: Optional[float]) -> _Pipeline:
        """The shared connection, or a new one: one attempt at a time for every task that
        needs it, each task waiting no longer than its own deadline."""
        while True:
            if self._closed:
                raise ConnectionLost("the client is closed")
            if self._pipeline is not None and self._pipeline.is_usable:
                return self._pipeline
            if self._connecting is None:
                connecting = asyncio.ensure_future(self._open(deadline))
                connecting.add_done_callback(self._connection_attempt_ended)
                self._connecting = connecting
            connecting = self._connecting
            done, _ = await asyncio.wait({connecting}, timeout=self._left(deadline))
            if not done:
                raise Timeout("no connection to countdownd at %s within the call's timeout" % self.socket_path)
            try:
                pipeline = connecting.result()
            except (ConnectionLost, Timeout):
                left = self._left(deadline)
                if left is not None and left <= 0:
                    raise
                continue  # Another task's attempt, bounded by its own deadline, gave up first.
            if self._closed:
                await pipeline.close()
                raise ConnectionLost("the client is closed")
            self._pipeline = pipeline
            return pipeline

    def _connection_attempt_ended(self, attempt: "asyncio.Future[_Pipeline]") -> None:
        """An attempt's connection becomes the client's even when every task that waited for it
        gave up first, so it is never left open with nobody holding it."""
        _retrieved(attempt)
        if self._connecting is attempt:
            self._connecting = None
        if attempt.cancelled() or attempt.exception() is not None:
            return
        pipeline = attempt.result()
        if self._closed:
            asyncio.ensure_future(pipeline.close())
        elif self._pipeline is None or not self._pipeline.is_usable:
            self._pipeline = pipeline
        elif self._pipeline is not pipeline:
            asyncio.ensure_future(pipeline.close())

    async def _request(self, line: str, is_change: bool, timeout: Any = _DEFAULT) -> Reply:
        """Sends one request and awaits its reply. A read whose connection broke is asked
        again; a change is not (`OutcomeUnknown`)."""
        data = encode_request(line)  # A line that cannot be sent is refused before anything else.
        deadline = self._deadline(timeout)
        while True:
            pipeline = await self._usable_pipeline(deadline)
            try:
                pending = pipeline.send(data)
            except ConnectionLost:
                continue  # Broken before the send: nothing was sent.
            try:
                drained = await pipeline.drain_if_needed(self._left(deadline))
                done, _ = await asyncio.wait({pending.future}, timeout=self._left(deadline)) if drained else (set(), set())
            except BaseException:
                pipeline.abandon("a request on this connection was cancelled")
                raise
            if not done:
                pipeline.abandon("a request on this connection timed out")
                raise Timeout("no answer from countdownd within the call's timeout; the connection is closed%s"
                              % ("; the request may or may not have been carried out" if is_change else ""),
                              maybe_applied=is_change)
            try:
                return pending.future.result()
            except OutcomeUnknown:
                if is_change:
                    raise
                left = self._left(deadline)
                if left is not None and left <= 0:
                    raise Timeout("no answer from countdownd within the call's timeout") from None
                # A read: asking again is harmless.

    async def _change(self, line: str, timeout: Any) -> Countdown:
        _, _, text = await self._request(line, True, timeout)
        countdown = parse_line("COUNTDOWN " + text)
        if not isinstance(countdown, Countdown):
            raise ProtocolViolation("unexpected answer to %s: OK %s" % (line.split()[0], text))
        return countdown

    # Requests

    async def start(self, name: str, duration: Union[int, float, str, None] = None, *, at: Any = None,
                    replace: bool = False, pause_on_suspend: Optional[bool] = None, cycle: Any = None,
                    repeat: Union[int, bool, None] = None, timeout: Any = _DEFAULT) -> Countdown:
        """As `Client.start`."""
        return await self._change(start_line(name, duration, at, replace, pause_on_suspend, cycle, repeat), timeout)

    async def status(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        """As `Client.status`."""
        countdowns, _, _ = await self._request("STATUS " + check_name(name), False, timeout)
        if not countdowns:
            raise ProtocolViolation("STATUS answered OK without a countdown")
        return countdowns[0]

    async def list(self, states: Optional[Iterable[str]] = None, prefix: Optional[str] = None, *,
                   timeout: Any = _DEFAULT) -> List[Countdown]:
        """As `Client.list`."""
        countdowns, _, _ = await self._request(list_line(states, prefix), False, timeout)
        return countdowns

    async def cancel(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        return await self._change("CANCEL " + check_name(name), timeout)

    async def pause(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        return await self._change("PAUSE " + check_name(name), timeout)

    async def resume(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        return await self._change("RESUME " + check_name(name), timeout)

    async def extend(self, name: str, duration: Union[int, float, str], *, timeout: Any = _DEFAULT) -> Countdown:
        return await self._change("EXTEND %s %s" % (check_name(name), duration_text(duration)), timeout)

    async def set_pause_on_suspend(self, name: str, pause: bool, *, timeout: Any = _DEFAULT) -> Countdown:
        """As `Client.set_pause_on_suspend`."""
        return await self._change("SET %s ON-SUSPEND %s" % (check_name(name), "pause" if pause else "count"), timeout)

    async def skip(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        """As `Client.skip`."""
        return await self._change("SKIP " + check_name(name), timeout)

    async def remove(self, name: str, *, timeout: Any = _DEFAULT) -> Countdown:
        return await self._change("REMOVE " + check_name(name), timeout)

    async def ping(self, *, timeout: Any = _DEFAULT) -> None:
        await self._request("PING", False, timeout)

    async def stats(self, *, timeout: Any = _DEFAULT) -> Dict[str, object]:
        _, stats, _ = await self._request("STATS", False, timeout)
        return stats

    # Waiting and following

    async def wait(self, name: str, timeout: Optional[float] = None) -> Countdown:
        """Until the countdown is finished; how it ended. Reconnects across a daemon restart.
        `Timeout` after `timeout` seconds (None: as long as it takes)."""
        try:
            return await asyncio.wait_for(self._wait(name), timeout)
        except asyncio.TimeoutError:
            raise Timeout("'%s' did not finish within %s s" % (name, timeout)) from None

    async def _wait(self, name: str) -> Countdown:
        check_name(name)
        while True:
            follower = await _Follower.open(self, None)
            try:
                # With snapshots: in cluster mode a RESYNC comes with a snapshot of each followed
                # countdown, finished ones too, which may be the only word of its end.
                await follower.request(subscribe_line([name], kinds=FINAL_KINDS + ("snapshot",)))
                countdowns, _, _ = await follower.request("STATUS " + name)
                if not countdowns:
                    raise ProtocolViolation("STATUS answered OK without a countdown")
                current = countdowns[0]
                if current.is_finished:
                    return current
                while True:
                    ended = how_it_ended(await follower.next_event(), current)
                    if ended is not None:
                        return ended
            except ConnectionLost:
                continue  # A daemon restart: follow it again.
            finally:
                await follower.close()

    async def subscribe(self, names: Optional[Iterable[str]] = None, prefix: Optional[str] = None,
                        kinds: Optional[Iterable[str]] = None, since: Optional[int] = None,
                        reconnect: bool = True, timeout: Optional[float] = None) -> AsyncIterator[Event]:
        """Events as `Client.subscribe` yields them, reconnecting the same way; `timeout` bounds
        each wait for the next event, reconnecting included (`Timeout`)."""
        names = list(names or [])
        last_seq = since
        resumed = False  # True once a connection was lost and is being taken up again.
        wants_snapshots = kinds is None or bool({"snapshot", "all"} & set(kinds))
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            try:
                follower = await _Follower.open(self, deadline, wait_for_daemon=reconnect)
            except ConnectionLost:
                if deadline is not None and loop.time() >= deadline:
                    raise Timeout("no event within %s s: countdownd could not be reached" % timeout) from None
                raise
            try:
                try:
                    _, _, text = await follower.request(subscribe_line(names, prefix, kinds, last_seq), deadline)
                except (Gone, BadRequest):
                    if not reconnect or last_seq is None or not resumed or not wants_snapshots:
                        raise
                    _, _, text = await follower.request(subscribe_line(names, prefix, kinds, None), deadline)
                    last_seq = None
                if last_seq is None:
                    last_seq = subscribed_seq(text)
                while True:
                    event = await follower.next_event(deadline)
                    if event.is_lifecycle:
                        last_seq = event.seq
                    yield event
                    deadline = None if timeout is None else loop.time() + timeout
            except Timeout:
                raise Timeout("no event within %s s" % timeout) from None
            except (ConnectionLost, Overflow):
                # Overflow: it fell too far behind and was cut off; SINCE brings what it missed.
                if not reconnect:
                    raise
                resumed = True
            finally:
                await follower.close()


class _Follower:
    """A subscribed connection of its own, read by one task: requests, then events."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader, self._writer = reader, writer
        self._events: Deque[Event] = deque()
        self._shutdown_reason: Optional[str] = None

    @classmethod
    async def open(cls, client: AsyncClient, deadline: Optional[float], wait_for_daemon: bool = True) -> "_Follower":
        """A greeted connection, trying again with a growing pause while the daemon is away."""
        return await _reach(lambda left: cls._greeted(client.socket_path, left, deadline), deadline, wait_for_daemon)

    @classmethod
    async def _greeted(cls, path: str, timeout: Optional[float], deadline: Optional[float]) -> "_Follower":
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), timeout)
        except (OSError, asyncio.TimeoutError) as error:
            raise cannot_connect(path, getattr(error, "strerror", None) or "no answer") from None
        follower = cls(reader, writer)
        try:
            greeting = parse_line(await follower._read_line(deadline))
        except BaseException:
            await follower.close()
            raise
        if isinstance(greeting, Err):
            await follower.close()
            raise greeting.error
        if not isinstance(greeting, Hello):
            await follower.close()
            raise ProtocolViolation("expected countdownd's HELLO greeting; is %s countdownd's socket?" % path)
        return follower

    async def close(self) -> None:
        self._writer.transport.abort()  # Nothing of a follower's is worth waiting to send.
        try:
            await self._writer.wait_closed()
        except OSError:
            pass  # Closed either way.

    async def _read_line(self, deadline: Optional[float] = None) -> str:
        loop = asyncio.get_running_loop()
        left = None if deadline is None else max(0.0, deadline - loop.time())
        try:
            raw = await asyncio.wait_for(self._reader.readline(), left)
        except asyncio.TimeoutError:
            raise Timeout("no answer from countdownd in time") from None
        except (OSError, asyncio.IncompleteReadError, ValueError) as error:
            raise ConnectionLost("lost the connection to countdownd (%s)" % error) from None
        if not raw.endswith(b"\n"):
            raise ConnectionLost("countdownd is stopping (%s)" % self._shutdown_reason if self._shutdown_reason
                                 else "countdownd closed the connection")
        return raw.rstrip(b"\r\n").decode("utf-8", "replace")

    async def request(self, line: str, deadline: Optional[float] = None) -> Reply:
        self._writer.write(encode_request(line))
        block = ReplyBlock()
        while True:
            parsed = parse_line(await self._read_line(deadline))
            if isinstance(parsed, Event):
                self._events.append(parsed)
            elif isinstance(parsed, Shutdown):
                self._shutdown_reason = parsed.reason
            else:
                text = block.take(parsed)
                if text is not None:
                    return block.countdowns, block.stats, text

    async def next_event(self, deadline: Optional[float] = None) -> Event:
        if self._events:
            return self._events.popleft()
        while True:
            parsed = parse_line(await self._read_line(deadline))
            if isinstance(parsed, Event):
                return parsed
            if isinstance(parsed, Err):
                raise parsed.error
            if isinstance(parsed, Shutdown):
                self._shutdown_reason = parsed.reason


__all__ = ["AsyncClient", "CountdowndError"]
