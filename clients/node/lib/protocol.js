// The countdownd line protocol (docs/PROTOCOL.md): what the daemon's lines mean, as JavaScript
// values. Pure: no I/O.

/** Where the user's own daemon listens ($COUNTDOWND_SOCKET, else the runtime directory's); a
 * server that uses the system daemon passes /run/countdownd/countdownd.sock. */
export function defaultSocketPath(env = process.env, uid = process.getuid()) {
  if (env.COUNTDOWND_SOCKET) return env.COUNTDOWND_SOCKET;
  if (env.XDG_RUNTIME_DIR) return `${env.XDG_RUNTIME_DIR}/countdownd/countdownd.sock`;
  if (uid === 0) return '/run/countdownd/countdownd.sock';
  return `/tmp/countdownd-${uid}/countdownd.sock`;
}

/** An `ERR <code> <message>` from the daemon, or a failure to reach it. */
export class CountdowndError extends Error {
  constructor(message, { code = 'error', fields = {}, maybeApplied = false, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'CountdowndError';
    this.code = code;
    this.fields = fields;
    /** The request was sent and its answer never came: it may or may not have been carried out. */
    this.maybeApplied = maybeApplied;
  }
}

/** START of a running or paused name; `remainingMs` says when it may start again. */
export class Busy extends CountdowndError {
  constructor(message, options) {
    super(message, { ...options, code: 'busy' });
    this.name = 'Busy';
  }

  /** The time left of the countdown in the way, when the daemon said. */
  get remainingMs() {
    const value = this.fields.remaining_ms;
    return value !== undefined && /^\d+$/.test(value) ? Number(value) : null;
  }

  /** Whole seconds until the name may start again, rounded up, at least 1 (an HTTP Retry-After). */
  get retryAfterS() {
    const remaining = this.remainingMs;
    return remaining === null ? 1 : Math.max(1, Math.ceil(remaining / 1000));
  }
}

/** The daemon could not be reached, or closed the connection before the request was sent. */
export class ConnectionLost extends CountdowndError {
  constructor(message, options = {}) {
    super(message, { code: 'connection-lost', ...options });
    this.name = 'ConnectionLost';
  }
}

/** The request was sent, then the connection broke before its answer: it may or may not have
 * been carried out. Never retry a start blindly. Not a ConnectionLost, which says nothing was. */
export class OutcomeUnknown extends CountdowndError {
  constructor(message, options = {}) {
    super(message, { ...options, code: 'outcome-unknown', maybeApplied: true });
    this.name = 'OutcomeUnknown';
  }
}

/** The call's timeout passed, or its AbortSignal aborted, before the answer; `cause` is the
 * signal's reason. The connection it was on is closed. `code` is `timeout` or `cancelled`. */
export class Aborted extends CountdowndError {
  constructor(message, options) {
    super(message, options);
    this.name = options.code === 'timeout' ? 'TimeoutError' : 'AbortError';
  }
}

/** A line this client cannot read where it expected one it can. */
export class ProtocolViolation extends CountdowndError {
  constructor(message) {
    super(message, { code: 'protocol-violation' });
    this.name = 'ProtocolViolation';
  }
}

const FIELD = /^([a-z_]+)=(\S*)$/;

/** The error of `ERR <code> <text>`: its message, and the trailing key=value fields. */
export function errorFrom(code, text) {
  const words = text.split(' ');
  const fields = {};
  while (words.length > 0) {
    const match = FIELD.exec(words[words.length - 1]);
    if (!match) break;
    fields[match[1]] = match[2];
    words.pop();
  }
  const message = words.join(' ');
  return code === 'busy' ? new Busy(message, { fields }) : new CountdowndError(message, { code, fields });
}

function int(word) {
  return word !== undefined && /^-?\d+$/.test(word) ? Number(word) : null;
}

/**
 * A cycle's `phase=<n>/<count>`, `label=` and `round=<n>[/<rounds>]` fields among `words`:
 * `{phase, phases, label, round, rounds}`, or null without `phase=`.
 */
export function cycleFrom(words) {
  let cycle = null;
  let label = null;
  let round = null;
  let rounds = null;
  for (const word of words) {
    const [key, value = ''] = word.split(/=(.*)/s);
    const [current, count] = value.split('/');
    if (key === 'phase' && int(current) !== null && int(count) !== null) cycle = { phase: int(current), phases: int(count) };
    else if (key === 'label' && value) label = value;
    else if (key === 'round' && int(current) !== null) { round = int(current); rounds = int(count); }
  }
  return cycle && { ...cycle, label, round, rounds };
}

/** `<name> <state> <remaining_ms> <total_ms> <deadline|-> [<owner_uid> [<late_ms>|-] [at|pause-on-suspend|-] [phase=… label=… round=…]]` */
export function countdownFrom(words) {
  if (words.length < 5 || int(words[2]) === null || int(words[3]) === null) return null;
  return {
    name: words[0],
    state: words[1],
    remainingMs: int(words[2]),
    totalMs: int(words[3]),
    deadlineUnixMs: int(words[4]),
    ownerUid: int(words[5]),
    lateMs: int(words[6]),
    pinned: words[7] === 'at',
    pausesOnSuspend: words[7] === 'pause-on-suspend',
    cycle: cycleFrom(words.slice(8)),
  };
}

function eventFrom(words) {
  if (words.length < 5 || int(words[0]) === null || int(words[3]) === null || int(words[4]) === null) return null;
  const event = { seq: int(words[0]), kind: words[1], name: words[2], remainingMs: int(words[3]), totalMs: int(words[4]) };
  if (event.kind === 'snapshot') event.state = words[5] ?? null;
  if (event.kind === 'done' || event.kind === 'phase') event.lateMs = int(words[5]);
  if (event.kind === 'paused' || event.kind === 'resumed') event.suspend = words[5] === 'suspend';
  if (event.kind === 'changed') event.pausesOnSuspend = words[5] === 'pause-on-suspend';
  event.cycle = cycleFrom(words.slice(event.kind === 'snapshot' ? 9 : 6));
  return event;
}

/** Whether an event is numbered by its own seq (ticks and snapshots carry the last lifecycle one). */
export function isLifecycle(event) {
  return event.kind !== 'tick' && event.kind !== 'snapshot';
}

/** Classifies one line from the daemon (without its newline); unknown lines are `{type: 'unknown'}`. */
export function parseLine(line) {
  const space = line.indexOf(' ');
  const head = space < 0 ? line : line.slice(0, space);
  const rest = space < 0 ? '' : line.slice(space + 1);
  const words = rest.split(' ').filter((word) => word !== '');
  switch (head) {
    case 'OK':
      return { type: 'ok', text: rest };
    case 'ERR': {
      if (words.length === 0) break;
      const split = rest.indexOf(' ');
      return { type: 'err', error: errorFrom(split < 0 ? rest : rest.slice(0, split), split < 0 ? '' : rest.slice(split + 1)) };
    }
    case 'EVENT': {
      const event = eventFrom(words);
      if (event) return { type: 'event', event };
      break;
    }
    case 'COUNTDOWN': {
      const countdown = countdownFrom(words);
      if (countdown) return { type: 'countdown', countdown };
      break;
    }
    case 'STAT': {
      if (words.length === 0) break;
      const split = rest.indexOf(' ');
      return { type: 'stat', key: split < 0 ? rest : rest.slice(0, split), value: split < 0 ? '' : rest.slice(split + 1) };
    }
    case 'HELLO':
      if (words.length >= 2 && words[0] === 'countdownd') return { type: 'hello', version: words[2] ?? null };
      break;
    case 'SHUTDOWN':
      return { type: 'shutdown', reason: rest };
    default:
      break;
  }
  return { type: 'unknown', line };
}

/** Refuses what would break the line protocol (spaces, newlines) before it is sent. */
export function checkName(name) {
  if (typeof name !== 'string' || name === '' || /\s/.test(name)) {
    throw new CountdowndError(`a countdown name is one word, such as tea or otp:+4915112345678: ${JSON.stringify(name)}`, { code: 'bad-name' });
  }
  return name;
}

/** A duration as the protocol takes it: milliseconds (a number of seconds), or text such as '5m'. */
/** A cycle's phases for `START … CYCLE`: text ('25m:work,5m:break'), or a list of durations or `[duration, label]` pairs. */
export function cycleText(cycle) {
  if (typeof cycle === 'string') {
    if (cycle === '' || /\s/.test(cycle)) {
      throw new CountdowndError(`a cycle is one word of <duration>[:<label>] phases separated by commas, such as 25m:work,5m:break: ${JSON.stringify(cycle)}`, { code: 'bad-request' });
    }
    return cycle;
  }
  if (!Array.isArray(cycle) || cycle.length === 0) {
    throw new CountdowndError('a cycle is a list of phases: durations or [duration, label] pairs', { code: 'bad-request' });
  }
  return cycle.map((phase) => {
    if (!Array.isArray(phase)) return durationText(phase);
    const [duration, label] = phase;
    if (typeof label !== 'string' || /[\s,:]/.test(label)) {
      throw new CountdowndError(`a phase's label is one word without ',' or ':': ${JSON.stringify(label)}`, { code: 'bad-request' });
    }
    return durationText(duration) + (label ? `:${label}` : '');
  }).join(',');
}

export function durationText(duration) {
  if (typeof duration === 'string') {
    if (duration === '' || /\s/.test(duration)) {
      throw new CountdowndError('a duration is one word, such as 90, 5m or 1500ms', { code: 'bad-duration' });
    }
    return duration;
  }
  if (typeof duration !== 'number' || !Number.isFinite(duration)) {
    throw new TypeError('a duration is seconds (a number) or text such as "5m"');
  }
  return `${Math.round(duration * 1000)}ms`;
}

export function subscribeLine({ names = [], prefix, kinds, since } = {}) {
  if (prefix !== undefined && names.length > 0) {
    throw new CountdowndError('follow names or a prefix, not both, on one subscription', { code: 'bad-request' });
  }
  const words = ['SUBSCRIBE'];
  if (prefix !== undefined) words.push('PREFIX', checkName(prefix));
  for (const name of names) words.push(checkName(name));
  if (kinds && kinds.length > 0) words.push('EVENTS', kinds.join(','));
  if (since !== undefined && since !== null) words.push('SINCE', String(Math.trunc(since)));
  return words.join(' ');
}

/** The seq of `OK subscribed <what> seq <seq> …`. */
export function subscribedSeq(text) {
  const words = text.split(' ');
  const index = words.indexOf('seq');
  return index >= 0 ? int(words[index + 1]) : null;
}
