// The client against the real stack: gateway, admitter, notifier, order
// worker on NATS JetStream, Redis and PostgreSQL (started by
// tools/e2e/clientjs_test.go).

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { UsherError } from '@usher/client';
import { buy } from '../examples/quickstart.mjs';
import { SKU, client, gateway, holder, queue, recorder, skip, until } from './stack.mjs';

test('a shopper joins, hears READY on the stream and the order is PAID', { skip: skip() }, async () => {
  const q = await queue();
  const ahead = await holder(q, 'ann');
  const log = [];
  const ben = client('ben');
  const ready = ben.wait(q, { onUpdate: (s) => log.push(`${s.status}${s.position ? ' ' + s.position : ''} via ${s.via}`) });
  await until(() => log.includes('WAITING 1 via stream'), 'ben WAITING 1 on the stream');
  await client('ann').leave(ahead);
  const s = await ready;
  assert.equal(log[0], 'WAITING 1 via join');
  assert.equal(s.via, 'stream');
  assert.match(s.token, /^ey[\w-]+\.[\w-]+\.[\w-]+$/);
  const order = await ben.order({ token: s.token, sku: SKU });
  assert.equal(order.status, 'PAID', JSON.stringify(order));
});

test('the quick-start snippet of docs/integration.md runs as written', { skip: skip() }, async () => {
  const q = await queue();
  const ahead = await holder(q, 'cat');
  const shown = [];
  const bought = buy({ base: gateway, user: 'dan', queue: q, sku: SKU }, (line) => shown.push(line));
  await until(() => shown.length > 0, 'the first place shown');
  await client('cat').leave(ahead);
  const order = await bought;
  assert.equal(order.status, 'PAID', JSON.stringify(order));
  assert.match(shown[0], /^#1 of \d+$/);
  assert.equal(shown.at(-1), 'READY');
});

test('a 429 is retried no sooner than its Retry-After', { skip: skip() }, async () => {
  // One join a second per address, a burst of one: the second join at
  // once is over the limit.
  const q = await queue({ targetActive: 5, rateLimit: { perIpPerSecond: 1, perIpBurst: 1, perUserPerSecond: 5, perUserBurst: 10, ordersPerSecond: 200 } });
  await client('eve').join(q);
  const rec = recorder();
  const retries = [];
  const fay = client('fay', { fetch: rec.fetch, retry: { onRetry: (r) => retries.push(r) } });
  // READY at once when the admitter is quick, else by the stream: the
  // subject here is the join's retry, not admission's timing.
  const s = await fay.wait(q);
  assert.equal(s.status, 'READY');
  const joins = rec.calls.filter((c) => c.method === 'POST');
  assert.deepEqual(joins.map((c) => c.status), [429, 202]);
  assert.equal(retries.length, 1);
  assert.equal(retries[0].status, 429);
  assert.ok(retries[0].retryAfterMs >= 1000, `Retry-After ${retries[0].retryAfterMs} ms, want at least 1 s`);
  assert.ok(retries[0].delayMs >= retries[0].retryAfterMs, `waited ${retries[0].delayMs} ms, want no less than Retry-After`);
  const waited = joins[1].at - joins[0].answeredAt;
  assert.ok(waited >= retries[0].retryAfterMs, `tried again after ${waited} ms, want at least Retry-After's ${retries[0].retryAfterMs}`);
});

test('a queue that asks for a proof of work gets one, and the join passes', { skip: skip() }, async () => {
  const q = await queue({ targetActive: 5, challenge: { mode: 'enforce', difficulty: 8 } });
  const rec = recorder();
  const progress = [];
  const s = await client('gus', { fetch: rec.fetch }).wait(q, { onProgress: (f) => progress.push(f) });
  assert.equal(s.status, 'READY');
  const joins = rec.calls.filter((c) => c.method === 'POST');
  assert.deepEqual(joins.map((c) => c.status), [428, 202]);
  assert.equal(joins[0].headers['Usher-PoW'], undefined);
  assert.match(joins[1].headers['Usher-PoW'], /^[A-Za-z0-9_-]{40}:(0|[1-9][0-9]*)$/);
  assert.equal(progress.at(-1), 1);
});

test('leaving ends the ticket: the stream says LEFT and the states end', { skip: skip() }, async () => {
  const q = await queue();
  await holder(q, 'hal');
  const ivy = client('ivy');
  const states = [];
  let ticket = '';
  for await (const s of ivy.follow(q)) {
    states.push(`${s.status} via ${s.via}`);
    if (!ticket && s.via === 'stream' && s.status === 'WAITING') {
      ticket = s.ticket;
      await ivy.leave(s);
    }
  }
  assert.deepEqual(states.slice(-1), ['LEFT via stream']);
  assert.equal((await ivy.poll({ queue: q, ticket })).status, 'LEFT');
});

test('an abort stops the wait at once and every call it made', { skip: skip() }, async () => {
  const q = await queue();
  await holder(q, 'jon');
  const rec = recorder();
  const ac = new AbortController();
  const states = [];
  const waiting = client('kim', { fetch: rec.fetch }).wait(q, { signal: ac.signal, onUpdate: (s) => states.push(s.via) });
  await until(() => states.includes('stream'), 'kim on the stream');
  const at = Date.now();
  ac.abort();
  await assert.rejects(waiting, { name: 'AbortError' });
  assert.ok(Date.now() - at < 1000, 'the wait outlived its abort by a second');
  assert.ok(rec.calls.every((c) => c.signal && c.signal.aborted), 'a call the wait made was left running');
  const made = rec.calls.length;
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(rec.calls.length, made, 'calls made after the abort');
});

test('an abort during the join rejects it', { skip: skip() }, async () => {
  const q = await queue({ challenge: { mode: 'enforce', difficulty: 30 } }); // hours of work
  const ac = new AbortController();
  const joining = client('lee').join(q, { signal: ac.signal });
  setTimeout(() => ac.abort(), 200);
  await assert.rejects(joining, { name: 'AbortError' });
});

test('a refused join is an UsherError with the problem', { skip: skip() }, async () => {
  const q = await queue({ state: 'closed' });
  const err = await client('max').join(q).catch((e) => e);
  assert.ok(err instanceof UsherError, String(err));
  assert.equal(err.status, 410);
  assert.equal(err.type, 'queue-closed');
  assert.equal(err.reason, 'closed');
});

test('the languages go as Accept-Language, and the page is in the first', { skip: skip() }, async () => {
  const q = await queue({ targetActive: 5 });
  const rec = recorder();
  const usher = client('ned', { fetch: rec.fetch, languages: ['de-AT', 'de', 'en'] });
  await usher.join(q);
  assert.equal(rec.calls[0].headers['Accept-Language'], 'de-AT, de;q=0.9, en;q=0.8');
  assert.equal(usher.pageURL(q), `${gateway}/q/${q}?lang=de-AT`);
  const page = await (await fetch(usher.pageURL(q))).text();
  assert.match(page, /<html lang="de/);
});

test('a ticket kept from an earlier visit is followed, not joined again', { skip: skip() }, async () => {
  const q = await queue();
  await holder(q, 'oli');
  const first = await client('pat').join(q);
  const rec = recorder();
  const again = client('pat', { fetch: rec.fetch });
  for await (const s of again.follow(q, { ticket: first.ticket })) {
    assert.equal(s.ticket, first.ticket);
    assert.equal(s.via, 'poll');
    break;
  }
  assert.ok(rec.calls.every((c) => c.method === 'GET'), 'it joined again');
});
