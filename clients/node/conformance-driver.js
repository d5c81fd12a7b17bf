#!/usr/bin/env node
// The Node.js client behind the conformance suite's driver protocol (clients/conformance/README.md):
// JSON lines in on stdin, one reply line per command on stdout. A call's timeout_ms is the
// library's own `timeout` on even calls and an `AbortSignal.timeout` on odd ones, so both ways
// of giving up are held to the contract.
import readline from 'node:readline';
import { Client, CountdowndError } from './index.js';

const capabilities = ['requests', 'timeouts', 'shared', 'reconnect', 'wait', 'subscribe', 'cycles'];
const write = (body) => process.stdout.write(`${JSON.stringify(body)}\n`);
const describe = (c) => ({
  name: c.name, state: c.state, remaining_ms: c.remainingMs, total_ms: c.totalMs,
  ...(c.cycle ? { phase: c.cycle.phase, phases: c.cycle.phases, label: c.cycle.label, round: c.cycle.round } : {}),
});

function errorJSON(error) {
  if (error instanceof CountdowndError) {
    const described = { kind: error.code, maybe_applied: error.maybeApplied, message: error.message };
    if (error.code === 'busy') described.remaining_ms = error.remainingMs;
    return described;
  }
  return { kind: 'not-a-countdownd-error', message: `${error?.name}: ${error?.message}` };
}

let client = null;
let counter = 0;
let subscriptions = new Map();

function bound(command) {
  if (command.timeout_ms === undefined) return {};
  counter += 1;
  if (command.timeout_ms === null) return { timeout: null };
  return counter % 2 === 0 ? { timeout: command.timeout_ms } : { timeout: null, signal: AbortSignal.timeout(command.timeout_ms) };
}

async function call(command) {
  const options = bound(command);
  const { method, name } = command;
  switch (method) {
    case 'start': return describe(await client.start(name, command.duration, { replace: command.replace ?? false, cycle: command.cycle, repeat: command.repeat, ...options }));
    case 'extend': return describe(await client.extend(name, command.duration, options));
    case 'list': return (await client.list({ prefix: command.prefix, ...options })).map(describe);
    case 'ping': await client.ping(options); return null;
    default: return describe(await client[method](name, options));
  }
}

async function outcome(promise) {
  try {
    return { ok: await promise };
  } catch (error) {
    return { error: errorJSON(error) };
  }
}

async function handle(command) {
  switch (command.op) {
    case 'connect':
      client = await Client.connect({ socketPath: command.socket });
      return null;
    case 'reset':
      for (const { iterator } of subscriptions.values()) iterator.return().catch(() => {});
      subscriptions = new Map();
      client?.close();
      return null;
    case 'call':
      return call(command);
    case 'storm': {
      const results = new Array(command.calls.length);
      let next = 0;
      const worker = async () => {
        while (next < command.calls.length) {
          const index = next++;
          results[index] = await outcome(call(command.calls[index]));
        }
      };
      await Promise.all(Array.from({ length: command.workers }, worker));
      return results;
    }
    case 'wait':
      return describe(await client.wait(command.name, { timeout: command.timeout_ms ?? null }));
    case 'subscribe': {
      const iterator = client.subscribe({ names: command.names ?? [], prefix: command.prefix, kinds: command.kinds, since: command.since, timeout: command.timeout_ms ?? null });
      subscriptions.set(command.sub, { iterator });
      return null;
    }
    case 'next_event': {
      const { value, done } = await subscriptions.get(command.sub).iterator.next();
      if (done) throw new CountdowndError('the subscription ended', { code: 'connection-lost' });
      return { seq: value.seq, kind: value.kind, name: value.name, remaining_ms: value.remainingMs, total_ms: value.totalMs };
    }
    case 'close_sub':
      subscriptions.get(command.sub)?.iterator.return().catch(() => {});
      subscriptions.delete(command.sub);
      return null;
    default:
      throw new Error(`unknown op ${command.op}`);
  }
}

write({ hello: 'node', capabilities });
const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
let queue = Promise.resolve();
for await (const line of lines) {
  const command = JSON.parse(line);
  if (command.op === 'wait') {
    outcome(handle(command)).then((result) => write({ ...result, id: command.id })); // Answered later.
    continue;
  }
  queue = queue.then(async () => write({ ...(await outcome(handle(command))), id: command.id }));
  await queue;
}
