"""The asyncio client: the same requests as `Client`, awaited."""
from __future__ import annotations

import asyncio
from collections import deque
from typing import AsyncIterator, Dict, Iterable, List, Optional, Tuple

from .protocol import (
    FINAL_KINDS, how_it_ended, BadRequest, ConnectionLost, Countdown, Err, Event, Gone, Hello, NotFound, Ok, Overflow,
    ProtocolViolation, Stat,
    check_name, default_socket_path, duration_text, list_line, parse_line, start_line, stat_value,
    subscribe_line, subscribed_seq,
)


class AsyncClient:
    """A connection to countdownd for asyncio programs.

    >>> async with await AsyncClient.connect() as client:
    ...     countdown = await client.start("tea", "3m")

    Requests on one client are answered in order; `subscribe` and `wait` use connections of
    their own. Errors are those of `Client`.
    """

    def __init__(self, socket_path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: Optional[float]):
        self.socket_path = socket_path
        self.timeout = timeout
        self.daemon_version: Optional[str] = None
        self._reader, self._writer = reader, writer
        self._events: deque = deque()
        self._lock = asyncio.Lock()

    @classmethod
    async def connect(cls, socket_path: Optional[str] = None, timeout: Optional[float] = 30.0) -> "AsyncClient":
        path = socket_path or default_socket_path()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), timeout)
        except (OSError, asyncio.TimeoutError) as error:
            raise ConnectionLost(
                "cannot connect to countdownd at %s (%s); start it with 'systemctl --user start countdownd.socket' "
                "or run 'countdownd', or pass the socket path it listens on" % (path, getattr(error, "strerror", None) or error)) from None
        client = cls(path, reader, writer, timeout)
        try:
            greeting = parse_line(await client._read_line(timeout))
        except asyncio.TimeoutError:
            await client.close()
            raise ConnectionLost("countdownd at %s accepted the connection but sent no greeting within %s s" % (path, timeout)) from None
        if isinstance(greeting, Err):
            await client.close()
            raise greeting.error
        if not isinstance(greeting, Hello):
            await client.close()
            raise ProtocolViolation("expected countdownd's HELLO greeting; is %s countdownd's socket?" % path)
        client.daemon_version = greeting.daemon_version
        return client

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass  # Closed either way.

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _read_line(self, timeout=None) -> str:
        try:
            line = await asyncio.wait_for(self._reader.readline(), timeout)
        except (OSError, asyncio.IncompleteReadError) as error:
            raise ConnectionLost("lost the connection to countdownd (%s)" % error) from None
        if not line.endswith(b"\n"):
            raise ConnectionLost("countdownd closed the connection")
        return line[:-1].decode("utf-8", "replace")

    async def _request(self, line: str) -> Tuple[List[Countdown], Dict[str, object], str]:
        async with self._lock:
            try:
                self._writer.write(line.encode() + b"\n")
                await self._writer.drain()
            except OSError as error:
                raise ConnectionLost("lost the connection to countdownd (%s)" % error) from None
            countdowns: List[Countdown] = []
            stats: Dict[str, object] = {}
            while True:
                parsed = parse_line(await self._read_line(self.timeout))
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

    async def _change(self, line: str) -> Countdown:
        _, _, text = await self._request(line)
        countdown = parse_line("COUNTDOWN " + text)
        if not isinstance(countdown, Countdown):
            raise ProtocolViolation("unexpected answer to %s: OK %s" % (line.split()[0], text))
        return countdown

    async def start(self, name: str, duration=None, *, at=None, replace: bool = False,
                    pause_on_suspend: bool = False) -> Countdown:
        return await self._change(start_line(name, duration, at, replace, pause_on_suspend))

    async def status(self, name: str) -> Countdown:
        countdowns, _, _ = await self._request("STATUS " + check_name(name))
        if not countdowns:
            raise ProtocolViolation("STATUS answered OK without a countdown")
        return countdowns[0]

    async def list(self, states: Optional[Iterable[str]] = None, prefix: Optional[str] = None) -> List[Countdown]:
        countdowns, _, _ = await self._request(list_line(states, prefix))
        return countdowns

    async def cancel(self, name: str) -> Countdown:
        return await self._change("CANCEL " + check_name(name))

    async def pause(self, name: str) -> Countdown:
        return await self._change("PAUSE " + check_name(name))

    async def resume(self, name: str) -> Countdown:
        return await self._change("RESUME " + check_name(name))

    async def extend(self, name: str, duration) -> Countdown:
        return await self._change("EXTEND %s %s" % (check_name(name), duration_text(duration)))

    async def remove(self, name: str) -> Countdown:
        return await self._change("REMOVE " + check_name(name))

    async def ping(self) -> None:
        await self._request("PING")

    async def stats(self) -> Dict[str, object]:
        _, stats, _ = await self._request("STATS")
        return stats

    async def next_event(self) -> Event:
        """The next event on this connection (after a SUBSCRIBE sent through it)."""
        if self._events:
            return self._events.popleft()
        while True:
            parsed = parse_line(await self._read_line())
            if isinstance(parsed, Event):
                return parsed
            if isinstance(parsed, Err):
                raise parsed.error

    async def wait(self, name: str) -> Countdown:
        """Until the countdown is finished; how it ended. Reconnects across a daemon restart;
        use `asyncio.wait_for` for a time limit."""
        delay = 0.05
        while True:
            try:
                follower = await AsyncClient.connect(self.socket_path, self.timeout)
            except ConnectionLost:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            try:
                # With snapshots: in cluster mode a RESYNC comes with a snapshot of each followed
                # countdown, finished ones too, which may be the only word of its end.
                await follower._request(subscribe_line([name], kinds=FINAL_KINDS + ("snapshot",)))
                current = await follower.status(name)
                if current.is_finished:
                    return current
                while True:
                    event = await follower.next_event()
                    ended = how_it_ended(event, current)
                    if ended is not None:
                        return ended
            except ConnectionLost:
                delay = 0.05
            finally:
                await follower.close()

    async def subscribe(self, names: Optional[Iterable[str]] = None, prefix: Optional[str] = None,
                        kinds: Optional[Iterable[str]] = None, since: Optional[int] = None,
                        reconnect: bool = True) -> AsyncIterator[Event]:
        """Events as `Client.subscribe` yields them, reconnecting the same way."""
        names = list(names or [])
        last_seq = since
        delay = 0.05
        resumed = False  # True once a connection was lost and is being taken up again.
        wants_snapshots = kinds is None or bool({"snapshot", "all"} & set(kinds))
        while True:
            try:
                follower = await AsyncClient.connect(self.socket_path, self.timeout)
            except ConnectionLost:
                if not reconnect:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            try:
                try:
                    _, _, text = await follower._request(subscribe_line(names, prefix, kinds, last_seq))
                except (Gone, BadRequest):
                    # Not kept that far back, or a daemon whose history never had it (its state
                    # was replaced): afresh, the current state as snapshots; but only on a
                    # reconnect, and only where snapshots were asked for, so that a gap is
                    # never silent. The caller's own `since` is answered as the daemon answers.
                    if not reconnect or last_seq is None or not resumed or not wants_snapshots:
                        raise
                    _, _, text = await follower._request(subscribe_line(names, prefix, kinds, None))
                    last_seq = None
                if last_seq is None:
                    last_seq = subscribed_seq(text)
                while True:
                    event = await follower.next_event()
                    if event.is_lifecycle:
                        last_seq = event.seq
                    yield event
            except (ConnectionLost, Overflow):
                # Overflow: it fell too far behind and was cut off; SINCE brings what it missed.
                if not reconnect:
                    raise
                resumed = True
            finally:
                await follower.close()
