// countdownd for Node.js: a client of the daemon of named countdowns, with Node's standard
// library only. Requests from every caller are pipelined on one connection and answered in
// order; a call that times out or is aborted closes that connection, so its late answer can
// never be read as another call's.

import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  Aborted, Busy, ConnectionLost, CountdowndError, OutcomeUnknown, ProtocolViolation, checkName,
  countdownFrom, cycleText, defaultSocketPath, durationText, isLifecycle, parseLine, subscribeLine, subscribedSeq,
} from './lib/protocol.js';

export {
  Aborted, Busy, ConnectionLost, CountdowndError, OutcomeUnknown, ProtocolViolation, defaultSocketPath,
} from './lib/protocol.js';

const FIRST_RETRY_MS = 10; // Back-off between attempts to reach a daemon that is away, doubled
const LAST_RETRY_MS = 500; // up to this: a restarted daemon is found within half a second.
const FINAL_KINDS = ['done', 'cancelled', 'removed'];

function cannotConnect(path, why) {
  return new ConnectionLost(`cannot connect to countdownd at ${path} (${why}); start it with 'systemctl --user start countdownd.socket' `
    + "(or the system's countdownd.socket), or run 'countdownd', or pass the socket path it listens on");
}

/** The signal a call is bounded by: its own `signal` and its `timeout` (ms), whichever ends
 * first; `release()` takes back what it hung on the caller's signal, once the call is over (a
 * signal shared by every call of a server would otherwise gather a listener per call). */
function boundOf({ timeout, signal } = {}, defaultTimeout) {
  const ms = timeout === undefined ? defaultTimeout : timeout;
  const timer = ms !== null && ms !== undefined ? AbortSignal.timeout(ms) : null;
  if (!signal || !timer) return { signal: signal ?? timer, release() {} };
  const controller = new AbortController();
  const forward = (from) => () => controller.abort(from.reason);
  const onCaller = forward(signal);
  const onTimer = forward(timer);
  if (signal.aborted) controller.abort(signal.reason);
  else {
    signal.addEventListener('abort', onCaller, { once: true });
    timer.addEventListener('abort', onTimer, { once: true });
  }
  return {
    signal: controller.signal,
    release() {
      signal.removeEventListener('abort', onCaller);
      timer.removeEventListener('abort', onTimer);
    },
  };
}

function abortedError(signal, what, maybeApplied) {
  const timedOut = signal.reason?.name === 'TimeoutError';
  const applied = maybeApplied ? '; the request may or may not have been carried out' : '';
  return new Aborted(`${what} ${timedOut ? 'timed out' : 'was aborted'} before countdownd answered${applied}`,
    { code: timedOut ? 'timeout' : 'cancelled', cause: signal.reason, maybeApplied });
}

/** Resolves when `promise` does, or rejects when `signal` aborts (the promise goes on). */
function raceSignal(promise, signal, onAbort) {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(onAbort());
  return new Promise((resolve, reject) => {
    const aborted = () => reject(onAbort());
    signal.addEventListener('abort', aborted, { once: true });
    promise.then((value) => {
      signal.removeEventListener('abort', aborted);
      resolve(value);
    }, (error) => {
      signal.removeEventListener('abort', aborted);
      reject(error);
    });
  });
}

/** A newline in any argument would be read as a second request, whose answer the next call
 * would take: refused here, once, for every request (and a lone surrogate, which UTF-8 cannot carry). */
function checkLine(line) {
  if (/[\r\n\0]/.test(line) || /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(line)) {
    throw new CountdowndError(`a request's words cannot hold a newline or NUL and must be text UTF-8 can carry: ${JSON.stringify(line.slice(0, 80))}`, { code: 'bad-request' });
  }
}

/** A connection whose lines are read as they come: replies matched to requests by order, or
 * handed to a subscriber. Once broken it fails whatever is in flight and is never written again. */
class Line {
  constructor(socket, path) {
    this.socket = socket;
    this.path = path;
    this.buffer = '';
    this.pending = []; // { resolve, reject, countdowns, stats }
    this.events = [];
    this.eventWaiters = [];
    this.broken = null;
    this.shutdownReason = null;
    this.greeting = null;
    socket.setEncoding('utf8');
    socket.on('data', (chunk) => this.take(chunk));
    socket.on('error', (error) => this.break(`lost the connection to countdownd (${error.message})`));
    const ended = () => this.break(this.shutdownReason ? `countdownd is stopping (${this.shutdownReason})` : 'countdownd closed the connection');
    socket.on('end', ended); // The daemon's end: nothing written after it would be read.
    socket.on('close', ended);
  }

  /** Connects and reads the greeting, within `signal`. */
  static open(path, signal) {
    return new Promise((resolve, reject) => {
      const socket = net.createConnection({ path });
      let line = null;
      const fail = (error) => {
        signal?.removeEventListener('abort', aborted);
        socket.destroy();
        reject(error);
      };
      const aborted = () => fail(abortedError(signal, 'connecting', false));
      if (signal?.aborted) {
        aborted();
        return;
      }
      signal?.addEventListener('abort', aborted, { once: true });
      socket.once('error', (error) => {
        if (line === null) fail(cannotConnect(path, error.code ?? error.message));
      });
      socket.once('connect', () => {
        line = new Line(socket, path);
        line.greeting = (greeting) => {
          signal?.removeEventListener('abort', aborted);
          if (greeting.type === 'hello') {
            line.daemonVersion = greeting.version;
            resolve(line);
          } else if (greeting.type === 'err') {
            fail(greeting.error); // ERR limit: too many connections; a real answer.
          } else {
            fail(new ProtocolViolation(`expected countdownd's HELLO greeting; is ${path} countdownd's socket?`));
          }
        };
        line.onBroken = (why) => {
          if (line.greeting) fail(new ConnectionLost(`${why} before its greeting`));
        };
      });
    });
  }

  /** Whether a request may go out on it: not broken, and the daemon has not said it is stopping. */
  get usable() {
    return this.broken === null && this.shutdownReason === null;
  }

  take(chunk) {
    this.buffer += chunk;
    let newline;
    while ((newline = this.buffer.indexOf('\n')) >= 0) {
      const text = this.buffer.slice(0, newline).replace(/\r$/, '');
      this.buffer = this.buffer.slice(newline + 1);
      this.line(parseLine(text));
    }
  }

  line(parsed) {
    if (this.greeting) {
      const greeting = this.greeting;
      this.greeting = null;
      greeting(parsed);
      return;
    }
    if (parsed.type === 'shutdown') {
      this.shutdownReason = parsed.reason;
      return;
    }
    if (parsed.type === 'event') {
      const waiter = this.eventWaiters.shift();
      if (waiter) waiter.resolve(parsed.event);
      else this.events.push(parsed.event);
      return;
    }
    if (parsed.type === 'err' && this.pending.length === 0) {
      this.break(parsed.error.message, parsed.error); // ERR overflow on a subscribed connection.
      return;
    }
    const head = this.pending[0];
    if (!head) return;
    if (parsed.type === 'countdown') head.countdowns.push(parsed.countdown);
    else if (parsed.type === 'stat') head.stats[parsed.key] = parsed.value;
    else if (parsed.type === 'ok') {
      this.pending.shift();
      head.resolve({ countdowns: head.countdowns, stats: head.stats, text: parsed.text });
    } else if (parsed.type === 'err') {
      this.pending.shift();
      head.reject(parsed.error);
    }
  }

  /** Writes a request and returns the promise of its reply, in one step, so the order of writes
   * is the order of replies whoever calls. */
  send(line) {
    checkLine(line);
    if (this.broken !== null) throw new ConnectionLost(`the connection is closed (${this.broken})`, { cause: 'not-sent' });
    if (this.shutdownReason !== null) throw new ConnectionLost(`countdownd is stopping (${this.shutdownReason})`, { cause: 'not-sent' });
    const promise = new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject, countdowns: [], stats: {} });
    });
    this.socket.write(`${line}\n`);
    return promise;
  }

  nextEvent() {
    if (this.events.length > 0) return Promise.resolve(this.events.shift());
    if (this.broken !== null) return Promise.reject(this.brokenError ?? new ConnectionLost(this.broken));
    return new Promise((resolve, reject) => this.eventWaiters.push({ resolve, reject }));
  }

  /** Breaks the line: closes the socket and fails every request in flight with OutcomeUnknown. */
  break(why, error = null) {
    if (this.broken !== null) return;
    this.broken = why;
    this.brokenError = error;
    this.socket.destroy();
    this.onBroken?.(why);
    for (const pending of this.pending.splice(0)) {
      pending.reject(new OutcomeUnknown(`${why} before this request's answer came: it may or may not have been carried out`));
    }
    for (const waiter of this.eventWaiters.splice(0)) waiter.reject(error ?? new ConnectionLost(why));
  }
}

/**
 * A client of countdownd, safe to share between any number of callers.
 *
 * Every method takes `{ timeout, signal }`: `timeout` in ms (the client's, 30 000 by default;
 * `null` for none) and an `AbortSignal`. A call that ends without its answer rejects with
 * `Aborted` (`code` `timeout` or `cancelled`, `maybeApplied` for a change) and closes the
 * connection; the other requests in flight on it reject with `OutcomeUnknown` (reads among them
 * are asked again), and the next call connects afresh.
 */
export class Client {
  /** @param {{ socketPath?: string, timeout?: number | null }} [options] */
  constructor({ socketPath, timeout = 30_000 } = {}) {
    this.socketPath = socketPath ?? defaultSocketPath();
    this.timeout = timeout;
    this.daemonVersion = null;
    this.line = null;
    this.connecting = null;
    this.closed = false;
  }

  /** A client whose first connection is made now, so a stopped daemon is said at once. */
  static async connect(options = {}) {
    const client = new Client(options);
    client.line = await Line.open(client.socketPath, boundOf({}, client.timeout).signal);
    client.daemonVersion = client.line.daemonVersion;
    return client;
  }

  /** Closes the connection; calls after it reject with ConnectionLost. */
  close() {
    this.closed = true;
    this.line?.break('the client was closed');
  }

  /** A new connection, trying again with a growing pause while the daemon is away, within `signal`. */
  async open(signal, waitForDaemon = true) {
    let delay = FIRST_RETRY_MS;
    for (;;) {
      try {
        const line = await Line.open(this.socketPath, signal);
        this.daemonVersion = line.daemonVersion;
        return line;
      } catch (error) {
        if (!(error instanceof ConnectionLost) || !waitForDaemon) throw error;
        try {
          await sleep(delay, undefined, signal ? { signal } : undefined);
        } catch {
          throw new ConnectionLost(`${error.message}; gave up when the call's time ran out`, { cause: signal.reason });
        }
        delay = Math.min(delay * 2, LAST_RETRY_MS);
      }
    }
  }

  async usableLine(signal) {
    for (;;) {
      if (this.closed) throw new ConnectionLost('the client is closed');
      if (this.line?.usable) return this.line;
      if (!this.connecting) {
        // One attempt for every caller that needs it, bounded by the client's own timeout.
        const attempt = this.open(boundOf({}, this.timeout).signal);
        this.connecting = attempt;
        attempt.then((line) => {
          if (this.closed) line.break('the client was closed');
          else if (!this.line?.usable) this.line = line;
          else if (this.line !== line) line.break('not needed');
        }, () => {}).finally(() => {
          if (this.connecting === attempt) this.connecting = null;
        });
      }
      const attempt = this.connecting;
      try {
        await raceSignal(attempt, signal, () => abortedError(signal, 'connecting', false));
      } catch (error) {
        if (error instanceof Aborted || !(error instanceof ConnectionLost) || signal?.aborted !== false) throw error;
        // That attempt gave up first; this call still has time: another.
      }
      await attempt.catch(() => {}); // Its bookkeeping (above) has run.
    }
  }

  async request(line, change, options) {
    checkLine(line);
    const bound = boundOf(options, this.timeout);
    try {
      return await this.requestWithin(line, change, bound.signal);
    } finally {
      bound.release();
    }
  }

  async requestWithin(line, change, signal) {
    const verb = line.split(' ')[0];
    for (;;) {
      const connection = await this.usableLine(signal);
      let reply;
      try {
        reply = connection.send(line);
      } catch {
        continue; // Broken between the check and the send: nothing was sent.
      }
      try {
        return await raceSignal(reply, signal, () => {
          connection.break(`another request on this connection (${verb}) ended without its answer`);
          return abortedError(signal, verb, change);
        });
      } catch (error) {
        if (error instanceof OutcomeUnknown && !change && !signal?.aborted) continue; // A read: ask again.
        reply.catch(() => {}); // Failed with the connection; nobody else awaits it.
        throw error;
      }
    }
  }

  async change(line, options) {
    const { text } = await this.request(line, true, options);
    const countdown = countdownFrom(text.split(' '));
    if (!countdown) throw new ProtocolViolation(`unexpected answer to ${line.split(' ')[0]}: OK ${text}`);
    return countdown;
  }

  /**
   * Starts a countdown: `duration` in seconds or as text ('5m', '1500ms'); 60 s by default.
   * Rejects with `Busy` (with `remainingMs` and `retryAfterS`) while one of that name runs,
   * unless `replace`. `pauseOnSuspend: true`: it stands still while the machine sleeps; false:
   * it counts on; left out: a name started again keeps its setting, a new one counts on.
   * `cycle`: phases run one after the other in the daemon (a pomodoro), as text
   * ('25m:work,5m:break') or a list of durations or `[duration, label]` pairs; `repeat`: that
   * many rounds, or `true` for ever.
   */
  async start(name, duration, { replace = false, pauseOnSuspend, at, cycle, repeat, ...options } = {}) {
    const words = ['START', checkName(name)];
    const hasDuration = duration !== undefined && duration !== null;
    if (cycle !== undefined && (hasDuration || at !== undefined)) {
      throw new CountdowndError("a cycle's phases give its durations: give cycle alone, without a duration or at", { code: 'bad-request' });
    }
    if (cycle === undefined && repeat !== undefined && repeat !== false) throw new CountdowndError('repeat repeats a cycle: give cycle too', { code: 'bad-request' });
    if (at !== undefined) words.push('AT', String(at instanceof Date ? at.getTime() : at));
    else if (cycle !== undefined) {
      words.push('CYCLE', cycleText(cycle));
      if (repeat === true) words.push('REPEAT');
      else if (repeat !== undefined && repeat !== false) {
        if (!Number.isInteger(repeat) || repeat < 1) throw new CountdowndError(`repeat is a number of rounds (1 or more), or true for ever: ${repeat}`, { code: 'bad-request' });
        words.push('REPEAT', String(repeat));
      }
    } else if (hasDuration) words.push(durationText(duration));
    if (replace) words.push('REPLACE');
    if (pauseOnSuspend === true) words.push('ON-SUSPEND', 'pause');
    else if (pauseOnSuspend === false && at === undefined) words.push('ON-SUSPEND', 'count');
    return this.change(words.join(' '), options);
  }

  /** The countdown's state now; rejects with code `not-found` when there is none. */
  async status(name, options) {
    const { countdowns } = await this.request(`STATUS ${checkName(name)}`, false, options);
    if (countdowns.length === 0) throw new ProtocolViolation('STATUS answered OK without a countdown');
    return countdowns[0];
  }

  /** Every countdown this user may see, optionally of some states or a name prefix. */
  async list({ states, prefix, ...options } = {}) {
    const words = ['LIST'];
    if (states && states.length > 0) words.push('STATE', states.join(','));
    if (prefix) words.push('PREFIX', checkName(prefix));
    return (await this.request(words.join(' '), false, options)).countdowns;
  }

  async cancel(name, options) { return this.change(`CANCEL ${checkName(name)}`, options); }

  async pause(name, options) { return this.change(`PAUSE ${checkName(name)}`, options); }

  async resume(name, options) { return this.change(`RESUME ${checkName(name)}`, options); }

  async remove(name, options) { return this.change(`REMOVE ${checkName(name)}`, options); }

  /** Whether a running or paused countdown stands still while the machine sleeps (`SET … ON-SUSPEND`), changed without restarting it. */
  async setPauseOnSuspend(name, pause, options) { return this.change(`SET ${checkName(name)} ON-SUSPEND ${pause ? 'pause' : 'count'}`, options); }

  /** Ends a cycle's running phase now and starts the next (`bad-request` for a plain countdown). */
  async skip(name, options) { return this.change(`SKIP ${checkName(name)}`, options); }

  async extend(name, duration, options) { return this.change(`EXTEND ${checkName(name)} ${durationText(duration)}`, options); }

  async ping(options) { await this.request('PING', false, options); }

  /** The daemon's figures (root: the whole daemon's; anyone else: their own). */
  async stats(options) { return (await this.request('STATS', false, options)).stats; }

  /**
   * Until the countdown is finished: how it ended (`done` or `cancelled`). Rides through a daemon
   * restart. `{ timeout, signal }` as for requests, but no timeout unless given.
   */
  async wait(name, { timeout = null, signal } = {}) {
    checkName(name);
    const within = boundOf({ timeout, signal }, null);
    try {
      return await this.waitWithin(name, within.signal);
    } finally {
      within.release();
    }
  }

  async waitWithin(name, bound) {
    for (;;) {
      const follower = await this.open(bound).catch((error) => {
        throw bound?.aborted ? abortedError(bound, `wait for '${name}'`, false) : error;
      });
      try {
        // Subscribed first, then asked: a done between the two cannot be missed.
        await raceSignal(follower.send(`SUBSCRIBE ${name} EVENTS ${[...FINAL_KINDS, 'snapshot'].join(',')}`), bound, () => abortedError(bound, 'wait', false));
        const { countdowns } = await raceSignal(follower.send(`STATUS ${name}`), bound, () => abortedError(bound, 'wait', false));
        const current = countdowns[0];
        if (!current) throw new ProtocolViolation('STATUS answered OK without a countdown');
        if (current.state === 'done' || current.state === 'cancelled') return current;
        for (;;) {
          const event = await raceSignal(follower.nextEvent(), bound, () => abortedError(bound, `wait for '${name}'`, false));
          if (event.name !== name) continue;
          if (event.kind === 'removed') throw new CountdowndError(`'${name}' was removed before it finished`, { code: 'not-found' });
          const state = event.kind === 'snapshot' ? event.state : event.kind;
          if (state === 'done' || state === 'cancelled') {
            return { ...current, state, remainingMs: event.remainingMs, totalMs: event.totalMs, deadlineUnixMs: null, lateMs: event.lateMs ?? null };
          }
        }
      } catch (error) {
        if (!(error instanceof ConnectionLost || error instanceof OutcomeUnknown)) throw error;
        // A daemon restart: follow it again (SUBSCRIBE, then STATUS).
      } finally {
        follower.break('done waiting');
      }
    }
  }

  /**
   * Events, as an async iterator, on a connection of its own: of `names`, of every countdown
   * whose name starts with `prefix`, or of everything. `kinds` limits them; `since` replays the
   * lifecycle events after that seq. A lost connection is taken up again with SINCE the last
   * lifecycle event seen (unless `reconnect` is false): none is missed or repeated, or, when
   * the daemon no longer keeps that far back, it subscribes afresh (snapshots) or rejects with
   * code `gone` rather than skip events silently. `timeout` (ms) bounds each wait for an event,
   * reconnecting included; `signal` ends the whole subscription.
   */
  async* subscribe({ names = [], prefix, kinds, since, reconnect = true, timeout = null, signal } = {}) {
    subscribeLine({ names, prefix, kinds, since }); // Refuses a bad request before any connection.
    let lastSeq = since ?? null;
    let resumed = false;
    const wantsSnapshots = !kinds || kinds.includes('snapshot') || kinds.includes('all');
    let within = boundOf({ timeout, signal }, null);
    let bound = within.signal;
    for (;;) {
      const follower = await this.open(bound, reconnect).catch((error) => {
        throw bound?.aborted ? abortedError(bound, 'subscribe', false) : error;
      });
      try {
        let reply;
        try {
          reply = await raceSignal(follower.send(subscribeLine({ names, prefix, kinds, since: lastSeq })), bound, () => abortedError(bound, 'subscribe', false));
        } catch (error) {
          if (!(error.code === 'gone' || error.code === 'bad-request') || !reconnect || lastSeq === null || !resumed || !wantsSnapshots) throw error;
          reply = await raceSignal(follower.send(subscribeLine({ names, prefix, kinds })), bound, () => abortedError(bound, 'subscribe', false));
          lastSeq = null;
        }
        if (lastSeq === null) lastSeq = subscribedSeq(reply.text);
        for (;;) {
          const event = await raceSignal(follower.nextEvent(), bound, () => abortedError(bound, 'waiting for an event', false));
          if (isLifecycle(event)) lastSeq = event.seq;
          within.release();
          yield event;
          within = boundOf({ timeout, signal }, null);
          bound = within.signal;
        }
      } catch (error) {
        const cutOff = error instanceof ConnectionLost || error instanceof OutcomeUnknown || error.code === 'overflow';
        if (!cutOff || !reconnect) {
          within.release();
          throw error;
        }
        resumed = true; // Overflow: it fell too far behind and was cut off; SINCE brings what it missed.
      } finally {
        follower.break('the subscription ended');
      }
    }
  }
}
