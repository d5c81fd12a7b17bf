// Types for countdownd's Node.js client (index.js).

export interface Countdown {
  name: string;
  state: 'running' | 'paused' | 'done' | 'cancelled';
  remainingMs: number;
  totalMs: number;
  deadlineUnixMs: number | null;
  ownerUid: number | null;
  lateMs: number | null;
  pinned: boolean;
  pausesOnSuspend: boolean;
  /** A cycle of phases (`START … CYCLE`): where it is; null for a plain countdown. */
  cycle: CyclePosition | null;
}

/** Where a cycle of phases is: the running phase from 1 of `phases`, its label, and the round from 1 (of `rounds`; null for ever) when it repeats. */
export interface CyclePosition {
  phase: number;
  phases: number;
  label: string | null;
  round: number | null;
  rounds: number | null;
}

export interface CountdownEvent {
  seq: number;
  kind: 'started' | 'paused' | 'resumed' | 'extended' | 'done' | 'cancelled' | 'removed' | 'phase' | 'changed' | 'tick' | 'snapshot' | string;
  name: string;
  remainingMs: number;
  totalMs: number;
  lateMs?: number | null;
  state?: string | null;
  suspend?: boolean;
  /** For `changed`: its new setting (true: it stands still while the machine sleeps). */
  pausesOnSuspend?: boolean;
  /** A cycle's countdown (for `phase`: the phase that began); null otherwise. */
  cycle?: CyclePosition | null;
}

/** Every call's bound: `timeout` in ms (the client's by default; null for none), and a signal. */
export interface CallOptions {
  timeout?: number | null;
  signal?: AbortSignal;
}

export type Duration = number | string;

export class CountdowndError extends Error {
  readonly code: string;
  readonly fields: Record<string, string>;
  /** The request was sent and its answer never came: it may or may not have been carried out. */
  readonly maybeApplied: boolean;
}
export class Busy extends CountdowndError {
  readonly remainingMs: number | null;
  readonly retryAfterS: number;
}
export class ConnectionLost extends CountdowndError {}
export class OutcomeUnknown extends ConnectionLost {}
/** `code` is 'timeout' or 'cancelled'; `cause` is the signal's reason. */
export class Aborted extends CountdowndError {}
export class ProtocolViolation extends CountdowndError {}

export function defaultSocketPath(env?: Record<string, string | undefined>, uid?: number): string;

export class Client {
  constructor(options?: { socketPath?: string; timeout?: number | null });
  static connect(options?: { socketPath?: string; timeout?: number | null }): Promise<Client>;
  readonly socketPath: string;
  daemonVersion: string | null;
  close(): void;
  start(name: string, duration?: Duration | null, options?: CallOptions & { replace?: boolean; pauseOnSuspend?: boolean; at?: Date | number; cycle?: string | Array<Duration | [Duration, string]>; repeat?: number | boolean }): Promise<Countdown>;
  status(name: string, options?: CallOptions): Promise<Countdown>;
  list(options?: CallOptions & { states?: string[]; prefix?: string }): Promise<Countdown[]>;
  cancel(name: string, options?: CallOptions): Promise<Countdown>;
  pause(name: string, options?: CallOptions): Promise<Countdown>;
  resume(name: string, options?: CallOptions): Promise<Countdown>;
  remove(name: string, options?: CallOptions): Promise<Countdown>;
  skip(name: string, options?: CallOptions): Promise<Countdown>;
  setPauseOnSuspend(name: string, pause: boolean, options?: CallOptions): Promise<Countdown>;
  extend(name: string, duration: Duration, options?: CallOptions): Promise<Countdown>;
  ping(options?: CallOptions): Promise<void>;
  stats(options?: CallOptions): Promise<Record<string, string>>;
  wait(name: string, options?: CallOptions): Promise<Countdown>;
  subscribe(options?: {
    names?: string[]; prefix?: string; kinds?: string[]; since?: number;
    reconnect?: boolean; timeout?: number | null; signal?: AbortSignal;
  }): AsyncGenerator<CountdownEvent, never, undefined>;
}
