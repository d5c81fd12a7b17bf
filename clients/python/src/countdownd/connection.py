"""One blocking connection to countdownd, and the rules that keep a reply with its request.

A `Connection` is used by one caller at a time (the `Client`'s pool hands it out). Its one rule:
once a request is sent, the connection is either read up to that request's final line, or
closed. A timeout, an interrupt (KeyboardInterrupt, a signal handler's exception) or any other
failure between the two closes it, so a late answer can never be read as the next request's.
"""
from __future__ import annotations

import select
import socket
import time
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

from .protocol import (
    ConnectionLost, Countdown, CountdowndError, Err, Event, Hello, OutcomeUnknown, ProtocolViolation, ReplyBlock,
    Shutdown, Timeout, encode_request, parse_line,
)

Reply = Tuple[List[Countdown], Dict[str, object], str]


def cannot_connect(path: str, why: str) -> ConnectionLost:
    return ConnectionLost(
        "cannot connect to countdownd at %s (%s); start it with 'systemctl --user start countdownd.socket' "
        "(or the system's countdownd.socket), or run 'countdownd', or pass the socket path it listens on" % (path, why))


def seconds_left(deadline: Optional[float]) -> Optional[float]:
    """Seconds until `deadline` (time.monotonic()), None for none; never below zero."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class NotSent(ConnectionLost):
    """The request never reached the daemon (it had closed this connection): sending it again
    on another connection is safe."""


class Connection:
    """A socket with its greeting read; `request` sends a line and reads its whole reply."""

    def __init__(self, path: str, deadline: Optional[float]):
        self.path = path
        self.daemon_version: Optional[str] = None
        self.shutdown_reason: Optional[str] = None
        self.events: Deque[Event] = deque()
        self._buffer = b""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock: Optional[socket.socket] = sock
        try:
            sock.settimeout(seconds_left(deadline))
            sock.connect(path)
        except socket.timeout:
            self.close()
            raise cannot_connect(path, "no answer to the connection") from None
        except OSError as error:
            self.close()
            raise cannot_connect(path, error.strerror or str(error)) from None
        try:
            greeting = parse_line(self.read_line(deadline))
        except Timeout:
            self.close()  # A stalled daemon (or a full backlog): a timeout of the call, not an absence.
            raise Timeout("countdownd at %s accepted the connection but sent no greeting within the call's timeout" % path) from None
        except BaseException:
            self.close()
            raise
        if isinstance(greeting, Err):
            self.close()
            raise greeting.error  # ERR limit: too many connections; a real answer, not retried.
        if not isinstance(greeting, Hello):
            self.close()
            raise ProtocolViolation("expected countdownd's HELLO greeting; is %s countdownd's socket?" % path)
        self.daemon_version = greeting.daemon_version

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass  # Closed either way; nothing to tell the caller.
            self._sock = None

    def is_idle_and_open(self) -> bool:
        """For a connection taken from the pool: nothing may arrive unasked on an idle request
        connection but the daemon's goodbye (SHUTDOWN, then the end), so anything readable
        means it is going or gone."""
        if self._sock is None or self._buffer:
            return False
        poller = select.poll()  # Not select(): it cannot take a descriptor past 1023.
        try:
            poller.register(self._sock, select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False

    def read_line(self, deadline: Optional[float]) -> str:
        """One line, by `deadline` (time.monotonic(); None: as long as it takes), else `Timeout`.
        The connection is closed on any failure."""
        sock = self._sock
        if sock is None:
            raise ConnectionLost("the connection is closed")
        while b"\n" not in self._buffer:
            left = seconds_left(deadline)
            if left is not None and left <= 0:
                raise Timeout("no answer from countdownd in time")
            try:
                sock.settimeout(left)
                chunk = sock.recv(65536)
            except socket.timeout:
                raise Timeout("no answer from countdownd in time") from None
            except OSError as error:
                self.close()
                raise ConnectionLost("lost the connection to countdownd (%s)" % (error.strerror or error)) from None
            if not chunk:
                self.close()
                why = "countdownd is stopping (%s)" % self.shutdown_reason if self.shutdown_reason else "countdownd closed the connection"
                raise ConnectionLost(why)
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.rstrip(b"\r").decode("utf-8", "replace")

    def send(self, data: bytes, deadline: Optional[float]) -> None:
        """Sends one request's bytes by `deadline`, or raises `NotSent` (the daemon had already
        closed: nothing was carried out) or `Timeout` (the line's end never left: nothing was
        carried out either, since the daemon runs only whole lines). Any failure closes the
        connection, an interrupt too: part of a line may have left."""
        sock = self._sock
        if sock is None:
            raise NotSent("the connection is closed")
        try:
            sock.settimeout(seconds_left(deadline))
            sock.sendall(data)
        except socket.timeout:
            self.close()
            raise Timeout("countdownd did not take the request within the call's timeout; the connection is closed") from None
        except OSError as error:
            # EPIPE or ECONNRESET: the daemon closed its end before this line, so it never ran.
            self.close()
            raise NotSent("lost the connection to countdownd (%s)" % (error.strerror or error)) from None
        except BaseException:
            self.close()
            raise

    def request(self, line: str, deadline: Optional[float], is_change: bool) -> Reply:
        """Sends `line` and reads its reply block: COUNTDOWN lines, STAT lines, the OK text; or
        raises the ERR. After the send, any failure closes the connection; a failure of the
        connection is `OutcomeUnknown` for a change, and `Timeout` says whether it was sent."""
        self.send(encode_request(line), deadline)
        try:
            return self._read_reply(deadline)
        except CountdowndError as error:
            if error.code in ("connection-lost", "timeout", "protocol-violation"):
                self.close()
                if isinstance(error, Timeout):
                    raise Timeout("no answer from countdownd within the call's timeout; the connection is closed%s"
                                  % ("; the request may or may not have been carried out" if is_change else ""),
                                  maybe_applied=is_change) from None
                if is_change and isinstance(error, ConnectionLost):
                    raise OutcomeUnknown("%s after the request was sent: it may or may not have been carried out"
                                         % error.message) from None
            raise
        except BaseException:
            self.close()  # KeyboardInterrupt, or a signal handler's exception: the reply is still due.
            raise

    def _read_reply(self, deadline: Optional[float]) -> Reply:
        block = ReplyBlock()
        while True:
            parsed = parse_line(self.read_line(deadline))
            if isinstance(parsed, Event):
                self.events.append(parsed)
            elif isinstance(parsed, Shutdown):
                self.shutdown_reason = parsed.reason
            else:
                text = block.take(parsed)
                if text is not None:
                    return block.countdowns, block.stats, text

    def next_event(self, deadline: Optional[float]) -> Event:
        """The next event on a subscribed connection, by `deadline`, else `Timeout`."""
        if self.events:
            return self.events.popleft()
        while True:
            parsed = parse_line(self.read_line(deadline))
            if isinstance(parsed, Event):
                return parsed
            if isinstance(parsed, Err):
                self.close()
                raise parsed.error  # overflow: the daemon closes it.
            if isinstance(parsed, Shutdown):
                self.shutdown_reason = parsed.reason
