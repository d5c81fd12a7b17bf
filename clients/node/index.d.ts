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
}

export interface CountdownEvent {
  seq: number;
  kind: 'started' | 'paused' | 'resumed' | 'extended' | 'done' | 'cancelled' | 'removed' | 'tick' | 'snapshot' | string;
  name: string;
  remainingMs: number;
  totalMs: number;
  lateMs?: number | null;
  state?: string | null;
  suspend?: boolean;
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
  start(name: string, duration?: Duration | null, options?: CallOptions & { replace?: boolean; pauseOnSuspend?: boolean; at?: Date | number }): Promise<Countdown>;
  status(name: string, options?: CallOptions): Promise<Countdown>;
  list(options?: CallOptions & { states?: string[]; prefix?: string }): Promise<Countdown[]>;
  cancel(name: string, options?: CallOptions): Promise<Countdown>;
  pause(name: string, options?: CallOptions): Promise<Countdown>;
  resume(name: string, options?: CallOptions): Promise<Countdown>;
  remove(name: string, options?: CallOptions): Promise<Countdown>;
  extend(name: string, duration: Duration, options?: CallOptions): Promise<Countdown>;
  ping(options?: CallOptions): Promise<void>;
  stats(options?: CallOptions): Promise<Record<string, string>>;
  wait(name: string, options?: CallOptions): Promise<Countdown>;
  subscribe(options?: {
    names?: string[]; prefix?: string; kinds?: string[]; since?: number;
    reconnect?: boolean; timeout?: number | null; signal?: AbortSignal;
  }): AsyncGenerator<CountdownEvent, never, undefined>;
}
