"""Client library for countdownd, the named-countdown daemon.

    from countdownd import Client, Busy

    with Client() as client:
        try:
            client.start("otp:+4915112345678", 60)
        except Busy as busy:
            print("Resend code in %d s" % busy.retry_after_s)

`Client` blocks and is safe to share between threads; `AsyncClient` is the same for asyncio,
safe to share between tasks. Pure standard library, Python 3.9 on.
The protocol is docs/PROTOCOL.md in countdownd's sources.
"""
from .aio import AsyncClient
from .client import Client
from .protocol import (
    BadDuration, BadName, BadRequest, Busy, ConnectionLost, Countdown, CountdowndError, Event, Forbidden, Gone,
    LimitReached, LineTooLong, NotFound, OutcomeUnknown, Overflow, ProtocolViolation, Timeout, Unavailable,
    UnknownCommand,
    default_socket_path, parse_line,
)

__version__ = "0.1.0"
__all__ = [
    "AsyncClient", "Client", "Countdown", "Event", "CountdowndError", "BadDuration", "BadName", "BadRequest", "Busy",
    "ConnectionLost", "Forbidden", "Gone", "LimitReached", "LineTooLong", "NotFound", "OutcomeUnknown", "Overflow",
    "ProtocolViolation", "Timeout", "Unavailable", "UnknownCommand", "default_socket_path", "parse_line",
]
