"""The countdownd line protocol (docs/PROTOCOL.md): what the daemon's lines mean, as Python values.

Pure: no I/O. Both clients (blocking and asyncio) read lines through `parse_line`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Union

PROTOCOL_VERSION = 1


def default_socket_path(environ: Optional[Dict[str, str]] = None, uid: Optional[int] = None) -> str:
    """Where the daemon listens, found as cdctl and countdownd find it."""
    environ = os.environ if environ is None else environ
    uid = os.getuid() if uid is None else uid
    if environ.get("COUNTDOWND_SOCKET"):
        return environ["COUNTDOWND_SOCKET"]
    if environ.get("XDG_RUNTIME_DIR"):
        return environ["XDG_RUNTIME_DIR"] + "/countdownd/countdownd.sock"
    if uid == 0:
        return "/run/countdownd/countdownd.sock"
    return "/tmp/countdownd-%d/countdownd.sock" % uid


@dataclass(frozen=True)
class Countdown:
    """A countdown as a reply describes it (`OK` after a change, `COUNTDOWN` of STATUS and LIST)."""
    name: str
    state: str  # running, paused, done or cancelled
    remaining_ms: int
    total_ms: int
    deadline_unix_ms: Optional[int]  # None unless running
    owner_uid: Optional[int] = None
    late_ms: Optional[int] = None  # a done delivered more than a second late
    pinned: bool = False  # counts down to a wall-clock time (START … AT)
    pauses_on_suspend: bool = False  # stands still while the machine sleeps (ON-SUSPEND pause)
    # A cycle of phases (START … CYCLE): the running phase from 1 of `phases`, its label, and
    # the round from 1 (of `rounds`, None for ever) when it repeats. None for a plain countdown.
    phase: Optional[int] = None
    phases: Optional[int] = None
    label: Optional[str] = None
    round: Optional[int] = None
    rounds: Optional[int] = None

    @property
    def is_finished(self) -> bool:
        return self.state in ("done", "cancelled")


@dataclass(frozen=True)
class Event:
    """`EVENT <seq> <kind> <name> <remaining_ms> <total_ms> …`: something that happened."""
    seq: int
    kind: str  # started, paused, resumed, extended, done, cancelled, removed, phase, changed, tick, snapshot
    name: str
    remaining_ms: int
    total_ms: int
    late_ms: Optional[int] = None  # done and phase only
    state: Optional[str] = None  # snapshot only
    deadline_unix_ms: Optional[int] = None  # snapshot of a running countdown
    owner_uid: Optional[int] = None  # snapshot only
    pinned: bool = False  # snapshot only
    pauses_on_suspend: bool = False  # snapshot, and changed (its new setting)
    suspend: bool = False  # paused or resumed because the machine slept, not by a request
    # A cycle's countdown, on every event (for `phase`: the phase that began); as on Countdown.
    phase: Optional[int] = None
    phases: Optional[int] = None
    label: Optional[str] = None
    round: Optional[int] = None
    rounds: Optional[int] = None

    @property
    def is_lifecycle(self) -> bool:
        """Numbered by its own `seq` (ticks and snapshots carry the last lifecycle number)."""
        return self.kind not in ("tick", "snapshot")


class CountdowndError(Exception):
    """An `ERR <code> <message>` from the daemon, or a failure to reach it. `fields` are its
    details for programs. `maybe_applied` is True when the request was sent and its answer never
    came: it may or may not have been carried out, so it must not be retried blindly."""
    code = "error"
    maybe_applied = False

    def __init__(self, message: str, code: Optional[str] = None, fields: Optional[Dict[str, str]] = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.fields = dict(fields or {})

    def __str__(self) -> str:
        return "%s (%s)" % (self.message, self.code)


class BadRequest(CountdowndError):
    code = "bad-request"


class UnknownCommand(CountdowndError):
    code = "unknown-command"


class BadName(CountdowndError):
    code = "bad-name"


class BadDuration(CountdowndError):
    code = "bad-duration"


class NotFound(CountdowndError):
    code = "not-found"


class Busy(CountdowndError):
    """START of a running or paused name: `remaining_ms` says when it may start again."""
    code = "busy"

    @property
    def remaining_ms(self) -> Optional[int]:
        value = self.fields.get("remaining_ms")
        return int(value) if value is not None and value.isdigit() else None

    @property
    def state(self) -> Optional[str]:
        return self.fields.get("state")

    @property
    def retry_after_s(self) -> int:
        """Whole seconds until the name may start again, rounded up, and at least 1 (what an HTTP
        429 carries as `Retry-After`). 1 when the daemon gave no `remaining_ms` (an older one)."""
        remaining = self.remaining_ms
        return max(1, -(-remaining // 1000)) if remaining is not None else 1


class Forbidden(CountdowndError):
    code = "forbidden"


class LimitReached(CountdowndError):
    code = "limit"


class LineTooLong(CountdowndError):
    code = "line-too-long"


class Overflow(CountdowndError):
    """This connection fell too far behind and the daemon closed it."""
    code = "overflow"


class Unavailable(CountdowndError):
    """The change could not be stored, so it was not made; try again later."""
    code = "unavailable"


class Gone(CountdowndError):
    """`SINCE <seq>`: events after it are no longer kept."""
    code = "gone"


class ConnectionLost(CountdowndError):
    """The daemon could not be reached (within the call's timeout), or closed the connection
    before the request was sent: the request was not carried out."""
    code = "connection-lost"


class OutcomeUnknown(CountdowndError):
    """Not a `ConnectionLost`, which says nothing was carried out. The request was sent, then the connection broke (the daemon stopped, or another call on
    the same connection timed out or was cancelled) before its answer came: it may or may not
    have been carried out. Check with `status` before doing it again; never retry a START
    blindly, since a retried one that answers `Busy` would tell a user to wait for a code they
    never got."""
    code = "outcome-unknown"
    maybe_applied = True


class Timeout(CountdowndError, TimeoutError):
    """No answer within the call's timeout. The connection it was on is closed, so its late
    answer can never be read as another request's. `maybe_applied` says whether the request had
    been sent (a change may then have been made)."""
    code = "timeout"

    def __init__(self, message: str, maybe_applied: bool = False):
        super().__init__(message)
        self.maybe_applied = maybe_applied


class ProtocolViolation(CountdowndError):
    """A line this client cannot read where it expected one it can."""
    code = "protocol-violation"


ERRORS = {cls.code: cls for cls in (BadRequest, UnknownCommand, BadName, BadDuration, NotFound, Busy, Forbidden,
                                     LimitReached, LineTooLong, Overflow, Unavailable, Gone)}

_FIELD = re.compile(r"^([a-z_]+)=(\S*)$")


def error_from(code: str, text: str) -> CountdowndError:
    """The exception for `ERR <code> <text>`: its message, and the trailing key=value fields."""
    words = text.split(" ")
    fields: Dict[str, str] = {}
    while words:
        match = _FIELD.match(words[-1])
        if not match:
            break
        fields[match.group(1)] = match.group(2)
        words.pop()
    message = " ".join(words)
    return ERRORS.get(code, CountdowndError)(message, code=code, fields=fields)


@dataclass(frozen=True)
class Hello:
    protocol: int
    daemon_version: Optional[str]


@dataclass(frozen=True)
class Ok:
    text: str


@dataclass(frozen=True)
class Err:
    error: CountdowndError


@dataclass(frozen=True)
class Stat:
    key: str
    value: str


@dataclass(frozen=True)
class Shutdown:
    reason: str


@dataclass(frozen=True)
class Resync:
    seq: int


@dataclass(frozen=True)
class Unknown:
    line: str


Line = Union[Hello, Ok, Err, Countdown, Event, Stat, Shutdown, Resync, Unknown]


def _int(text: str) -> Optional[int]:
    try:
        return int(text)
    except ValueError:
        return None


def _cycle(words: list) -> dict:
    """A cycle's `phase=<n>/<count>`, `label=` and `round=<n>[/<rounds>]` fields among `words`,
    as keyword arguments for Countdown and Event (none without `phase=`)."""
    fields = {}
    for word in words:
        key, _, value = word.partition("=")
        if key == "phase":
            current, _, count = value.partition("/")
            if _int(current) is not None and _int(count) is not None:
                fields["phase"], fields["phases"] = int(current), int(count)
        elif key == "label" and value:
            fields["label"] = value
        elif key == "round":
            current, _, count = value.partition("/")
            if _int(current) is not None:
                fields["round"] = int(current)
                fields["rounds"] = _int(count) if count else None
    return fields if "phase" in fields else {}


def countdown_fields(words: list) -> Optional[Countdown]:
    """`<name> <state> <remaining_ms> <total_ms> <deadline_unix_ms|-> [<owner_uid> [<late_ms>|-]
    [at|pause-on-suspend|-] [phase=… label=… round=…]]`."""
    if len(words) < 5 or _int(words[2]) is None or _int(words[3]) is None:
        return None
    return Countdown(
        name=words[0], state=words[1], remaining_ms=int(words[2]), total_ms=int(words[3]),
        deadline_unix_ms=_int(words[4]),
        owner_uid=_int(words[5]) if len(words) > 5 else None,
        late_ms=_int(words[6]) if len(words) > 6 else None,
        pinned=len(words) > 7 and words[7] == "at",
        pauses_on_suspend=len(words) > 7 and words[7] == "pause-on-suspend",
        **_cycle(words[8:]),
    )


def _event(words: list) -> Optional[Event]:
    if len(words) < 5 or _int(words[0]) is None or _int(words[3]) is None or _int(words[4]) is None:
        return None
    seq, kind, name, remaining, total = int(words[0]), words[1], words[2], int(words[3]), int(words[4])
    if kind == "snapshot":
        return Event(seq, kind, name, remaining, total,
                     state=words[5] if len(words) > 5 else None,
                     deadline_unix_ms=_int(words[6]) if len(words) > 6 else None,
                     owner_uid=_int(words[7]) if len(words) > 7 else None,
                     pinned=len(words) > 8 and words[8] == "at",
                     pauses_on_suspend=len(words) > 8 and words[8] == "pause-on-suspend",
                     **_cycle(words[9:]))
    late = _int(words[5]) if kind in ("done", "phase") and len(words) > 5 else None
    suspend = kind in ("paused", "resumed") and len(words) > 5 and words[5] == "suspend"
    # A `changed` says the new setting where others have their optional field.
    pauses = kind == "changed" and len(words) > 5 and words[5] == "pause-on-suspend"
    return Event(seq, kind, name, remaining, total, late_ms=late, suspend=suspend, pauses_on_suspend=pauses, **_cycle(words[6:]))


def parse_line(line: str) -> Line:
    """Classifies one line from the daemon (without its newline). Unknown trailing fields are
    ignored, as the protocol asks."""
    head, _, rest = line.partition(" ")
    words = rest.split()
    if head == "OK":
        return Ok(rest)
    if head == "ERR" and words:
        code, _, text = rest.partition(" ")
        return Err(error_from(code, text))
    if head == "EVENT":
        event = _event(words)
        return event if event else Unknown(line)
    if head == "COUNTDOWN":
        countdown = countdown_fields(words)
        return countdown if countdown else Unknown(line)
    if head == "STAT" and words:
        key, _, value = rest.partition(" ")
        return Stat(key, value)
    if head == "HELLO" and len(words) >= 2 and words[0] == "countdownd" and _int(words[1]) is not None:
        return Hello(int(words[1]), words[2] if len(words) > 2 else None)
    if head == "SHUTDOWN":
        return Shutdown(rest)
    if head == "RESYNC" and words and _int(words[0]) is not None:
        return Resync(int(words[0]))
    return Unknown(line)


class ReplyBlock:
    """One request's reply, gathered line by line: `COUNTDOWN` and `STAT` lines, then the final
    `OK` or `ERR`. Every client reads replies through it; events and SHUTDOWN are the caller's."""

    def __init__(self) -> None:
        self.countdowns: List[Countdown] = []
        self.stats: Dict[str, object] = {}

    def take(self, parsed: "Line") -> Optional[str]:
        """The `OK` text once the block is whole, raising the `ERR`'s error; None while it goes
        on (RESYNC and unknown lines are not a reply: the protocol says to ignore them)."""
        if isinstance(parsed, Countdown):
            self.countdowns.append(parsed)
        elif isinstance(parsed, Stat):
            self.stats[parsed.key] = stat_value(parsed.value)
        elif isinstance(parsed, Ok):
            return parsed.text
        elif isinstance(parsed, Err):
            raise parsed.error
        return None


def duration_text(duration: Union[int, float, str]) -> str:
    """A duration as the protocol takes it: seconds (int or float), or text such as '5m', '1500ms'."""
    if isinstance(duration, str):
        if not duration or not duration.isprintable() or any(c.isspace() for c in duration):
            raise BadDuration("a duration is one word, such as 90, 5m or 1500ms: %r" % (duration,), fields={})
        return duration
    if isinstance(duration, bool) or not isinstance(duration, (int, float)):
        raise TypeError("duration must be seconds (int or float) or text such as '5m'")
    if duration != duration or duration in (float("inf"), float("-inf")):
        raise BadDuration("a duration is a number of seconds, not %r" % (duration,), fields={})
    milliseconds = int(round(duration * 1000))
    return "%dms" % milliseconds


def encode_request(line: str) -> bytes:
    """The request's bytes with its newline, or `BadRequest` for a line that would be read as more
    than one request (a newline inside it, from any argument) or cannot be sent as UTF-8: checked
    once, here, for every request of both clients."""
    if "\n" in line or "\r" in line or "\0" in line:
        raise BadRequest("a request's words cannot hold a newline or NUL: %r" % (line[:80],))
    try:
        return line.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        raise BadRequest("a request's words must be text that UTF-8 can carry: %r" % (line[:80],)) from None


def check_name(name: str) -> str:
    """Refuses what would break the line protocol (spaces, newlines) before it is sent; the
    daemon checks the rest of the naming rules."""
    if not isinstance(name, str) or not name or any(c.isspace() or c == "\0" for c in name):
        raise BadName("a countdown name is one word, such as tea or otp:+4915112345678: %r" % (name,))
    return name


def subscribe_line(names: Optional[Iterable[str]] = None, prefix: Optional[str] = None,
                   kinds: Optional[Iterable[str]] = None, since: Optional[int] = None) -> str:
    """`SUBSCRIBE [names… | PREFIX p] [EVENTS kinds] [SINCE seq]`."""
    words = ["SUBSCRIBE"]
    names = list(names or [])
    if prefix is not None and names:
        raise ValueError("follow names or a prefix, not both, on one subscription")
    if prefix is not None:
        words += ["PREFIX", check_name(prefix)]
    words += [check_name(n) for n in names]
    if kinds:
        words += ["EVENTS", ",".join(kinds)]
    if since is not None:
        words += ["SINCE", str(int(since))]
    return " ".join(words)


def at_text(at) -> str:
    """A wall-clock time for `START … AT`: Unix milliseconds (int) or an aware datetime."""
    if isinstance(at, bool):
        raise TypeError("at must be Unix milliseconds (int) or a timezone-aware datetime")
    if isinstance(at, int):
        return str(at)
    if hasattr(at, "isoformat") and getattr(at, "tzinfo", None) is not None:
        return at.isoformat(timespec="milliseconds")
    raise TypeError("at must be Unix milliseconds (int) or a timezone-aware datetime (naive ones are ambiguous)")


def cycle_text(cycle) -> str:
    """A cycle's phases for `START … CYCLE`: a list of durations or `(duration, label)` pairs, or
    the protocol's own text ('25m:work,5m:break')."""
    if isinstance(cycle, str):
        if not cycle or any(c.isspace() for c in cycle):
            raise ValueError("a cycle is one word of <duration>[:<label>] phases separated by commas, such as 25m:work,5m:break: %r" % (cycle,))
        return cycle
    parts = []
    for phase in cycle:
        if isinstance(phase, tuple):
            duration, label = phase
            if not isinstance(label, str) or any(c.isspace() or c in ",:" for c in label):
                raise ValueError("a phase's label is one word without ',' or ':': %r" % (label,))
            parts.append(duration_text(duration) + (":" + label if label else ""))
        else:
            parts.append(duration_text(phase))
    if not parts:
        raise ValueError("a cycle has at least one phase")
    return ",".join(parts)


def start_line(name: str, duration=None, at=None, replace: bool = False, pause_on_suspend: Optional[bool] = None,
               cycle=None, repeat: Union[int, bool, None] = None) -> str:
    """`START <name> [<duration>] [REPLACE] [ON-SUSPEND pause|count]`, `START <name> AT <time> [REPLACE]`,
    or `START <name> CYCLE <phases> [REPEAT [<rounds>]] …`. `pause_on_suspend` None sends no
    ON-SUSPEND: a name started again keeps its setting. `repeat`: a number of rounds, or True
    for ever."""
    if duration is not None and at is not None:
        raise ValueError("give a duration or at, not both")
    if cycle is not None and (duration is not None or at is not None):
        raise ValueError("a cycle's phases give its durations: give cycle alone, without duration or at")
    if repeat is not None and repeat is not False and cycle is None:
        raise ValueError("repeat repeats a cycle: give cycle too")
    if at is not None and pause_on_suspend:
        raise ValueError("a countdown to a time of day (at) cannot pause while the machine sleeps; give a duration")
    words = ["START", check_name(name)]
    if at is not None:
        words += ["AT", at_text(at)]
    elif cycle is not None:
        words += ["CYCLE", cycle_text(cycle)]
        if repeat is True:
            words.append("REPEAT")
        elif repeat is not None and repeat is not False:
            if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
                raise ValueError("repeat is a number of rounds (1 or more), or True for ever: %r" % (repeat,))
            words += ["REPEAT", str(repeat)]
    elif duration is not None:
        words.append(duration_text(duration))
    if replace:
        words.append("REPLACE")
    if pause_on_suspend is not None and at is None:
        words += ["ON-SUSPEND", "pause" if pause_on_suspend else "count"]
    return " ".join(words)


def list_line(states: Optional[Iterable[str]] = None, prefix: Optional[str] = None) -> str:
    """`LIST [STATE s,…] [PREFIX p]`."""
    words = ["LIST"]
    states = list(states or [])
    if states:
        words += ["STATE", ",".join(states)]
    if prefix:
        words += ["PREFIX", check_name(prefix)]
    return " ".join(words)


def subscribed_seq(ok_text: str) -> Optional[int]:
    """The `seq` of `OK subscribed <what> seq <seq> …`."""
    words = ok_text.split()
    if "seq" in words:
        index = words.index("seq")
        if index + 1 < len(words):
            return _int(words[index + 1])
    return None


def stat_value(value: str):
    """A STATS value: an int where it is one, else the text."""
    number = _int(value)
    return number if number is not None else value


FINAL_KINDS = ("done", "cancelled", "removed")


def how_it_ended(event: Event, current: Countdown) -> Optional[Countdown]:
    """For `wait`: how `current` ended, if `event` (of its name) says so: a `done` or `cancelled`
    event, or a snapshot of it finished (a cluster's RESYNC). `NotFound` if it was removed first;
    `None` for any other event."""
    if event.name != current.name:
        return None
    if event.kind == "removed":
        raise NotFound("'%s' was removed before it finished" % current.name)
    state = event.state if event.kind == "snapshot" else event.kind
    if state not in ("done", "cancelled"):
        return None
    return Countdown(event.name, state, event.remaining_ms, event.total_ms, None,
                     owner_uid=current.owner_uid, late_ms=event.late_ms, pinned=current.pinned)
