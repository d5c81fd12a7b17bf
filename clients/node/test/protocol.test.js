// The codec, without a daemon (the conformance suite runs the client against a real one).
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { test } from 'node:test';
import { Busy, Client, CountdowndError } from '../index.js';
import { checkName, durationText, parseLine, subscribeLine, subscribedSeq } from '../lib/protocol.js';

test('a busy START carries the time left', () => {
  const { type, error } = parseLine("ERR busy 'otp:+49151' is running with 0:00:58 left; wait for it, CANCEL it, or START it with REPLACE remaining_ms=57814 state=running");
  assert.equal(type, 'err');
  assert.ok(error instanceof Busy && error instanceof CountdowndError);
  assert.equal(error.remainingMs, 57814);
  assert.equal(error.retryAfterS, 58);
  assert.equal(error.fields.state, 'running');
  assert.equal(error.message, "'otp:+49151' is running with 0:00:58 left; wait for it, CANCEL it, or START it with REPLACE");
});

test('lines, and the ones a newer daemon may add', () => {
  const { countdown } = parseLine('COUNTDOWN tea running 2874 3000 1764488400000 1000 - pause-on-suspend');
  assert.deepEqual([countdown.name, countdown.remainingMs, countdown.ownerUid, countdown.pausesOnSuspend], ['tea', 2874, 1000, true]);
  const { event } = parseLine('EVENT 2 done tea 0 3000 1500 future-field');
  assert.deepEqual([event.seq, event.kind, event.lateMs], [2, 'done', 1500]);
  assert.equal(parseLine('FUTURE thing').type, 'unknown');
  assert.equal(parseLine('EVENT x').type, 'unknown');
  assert.equal(subscribedSeq('subscribed all seq 41 events done'), 41);
});

test('pauseOnSuspend: true pauses, false counts on, left out keeps what the name had', async () => {
  const sent = [];
  const client = new Client({ socket: '/nonexistent' });
  client.change = async (line) => { sent.push(line); return {}; };
  await client.start('p', '25m', { pauseOnSuspend: true });
  await client.start('p', '25m', { replace: true });
  await client.start('p', '25m', { replace: true, pauseOnSuspend: false });
  await client.start('q', null, { at: 1798135200000, pauseOnSuspend: false });
  assert.deepEqual(sent, ['START p 25m ON-SUSPEND pause', 'START p 25m REPLACE', 'START p 25m REPLACE ON-SUSPEND count', 'START q AT 1798135200000']);
});

test('cycles: the START line, skip, and the phase fields read back', async () => {
  const sent = [];
  const client = new Client({ socket: '/nonexistent' });
  client.change = async (line) => { sent.push(line); return {}; };
  await client.start('focus', null, { cycle: [['25m', 'work'], [300, 'break']], repeat: 2, pauseOnSuspend: true });
  await client.start('deep', undefined, { cycle: '50m:work,10m:break', repeat: true });
  await client.skip('focus');
  assert.deepEqual(sent, ['START focus CYCLE 25m:work,300000ms:break REPEAT 2 ON-SUSPEND pause', 'START deep CYCLE 50m:work,10m:break REPEAT', 'SKIP focus']);
  await assert.rejects(client.start('x', '5m', { cycle: '1m' }), (error) => error.code === 'bad-request');
  await assert.rejects(client.start('x', null, { repeat: 2 }), (error) => error.code === 'bad-request');
  const { countdown } = parseLine('COUNTDOWN p running 2500 3000 1700000002500 1000 - - phase=1/2 label=work round=1/4');
  assert.deepEqual(countdown.cycle, { phase: 1, phases: 2, label: 'work', round: 1, rounds: 4 });
  assert.equal(countdown.lateMs, null);
  const { event } = parseLine('EVENT 9 phase p 1000 1000 1500 phase=2/2 round=3');
  assert.deepEqual([event.kind, event.lateMs, event.cycle], ['phase', 1500, { phase: 2, phases: 2, label: null, round: 3, rounds: null }]);
  assert.equal(parseLine('EVENT 8 snapshot p 2500 3000 running 17 1000 - phase=1/2 label=work').event.cycle.label, 'work');
  assert.equal(parseLine('COUNTDOWN tea paused 5000 6000 - 1000').countdown.cycle, null);
  const changed = parseLine('EVENT 10 changed p 1000 1000 pause-on-suspend phase=2/2').event;
  assert.deepEqual([changed.kind, changed.pausesOnSuspend, changed.cycle.phase], ['changed', true, 2]);
  await client.setPauseOnSuspend('focus', false);
  assert.equal(sent.at(-1), 'SET focus ON-SUSPEND count');
});

test('what would break the line protocol is refused before it is sent', () => {
  assert.throws(() => checkName('two words'), (error) => error.code === 'bad-name');
  assert.throws(() => durationText('5 m'), (error) => error.code === 'bad-duration');
  assert.equal(durationText(1.5), '1500ms');
  assert.equal(subscribeLine({ prefix: 'otp:', kinds: ['done'], since: 7 }), 'SUBSCRIBE PREFIX otp: EVENTS done SINCE 7');
  assert.throws(() => subscribeLine({ names: ['a'], prefix: 'b' }), (error) => error.code === 'bad-request');
});

test('no argument smuggles a second request', async () => {
  const client = new Client({ socketPath: '/nonexistent/countdownd.sock', timeout: 100 });
  for (const call of [
    () => client.list({ states: ['running\nPING'] }),
    () => client.extend('a', '1m\nPING'),
    () => client.status('bad\udcff'),
  ]) {
    await assert.rejects(call, (error) => ['bad-request', 'bad-duration'].includes(error.code));
  }
});

test("a signal shared by many calls keeps no listener once they end", async () => {
  const client = new Client({ socketPath: '/nonexistent/countdownd.sock', timeout: 50 });
  const shutdown = new AbortController();
  for (let i = 0; i < 20; i += 1) {
    await assert.rejects(client.status('x', { signal: shutdown.signal }));
  }
  assert.equal(getEventListeners(shutdown.signal, 'abort').length, 0);
});
