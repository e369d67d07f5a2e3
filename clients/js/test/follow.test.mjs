// How the client follows a ticket when the stream misbehaves: what the
// real notifier does only under faults (a dropped connection, a silent
// one, a refused ticket, a line reset) is played here by a small server
// that answers as docs/api.md says the gateway and notifier do. What is
// checked is the client's side of the protocol.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';

import { createClient } from '@usher/client';
import { backoff } from '../src/retry.js';

/** serve answers with handler on a loopback port until the test ends. */
async function serve(t, handler) {
  const srv = createServer(handler);
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => { srv.closeAllConnections(); srv.close(); });
  return 'http://127.0.0.1:' + srv.address().port;
}

function json(res, status, body) {
  res.writeHead(status, { 'Content-Type': status >= 400 ? 'application/problem+json' : 'application/json' });
  res.end(JSON.stringify(body));
}

function sse(res) {
  res.writeHead(200, { 'Content-Type': 'text/event-stream' });
}

const waiting = (ticket, extra) => Object.assign({ ticket, queue: 'q', status: 'WAITING', position: 2, waiting: 2, pollAfterMs: 60000, events: '/events/' + ticket }, extra);

// A client that never waits between tries: backoff with random() = 0.
const client = (base, o) => createClient(Object.assign({ base, headers: { 'X-User-Id': 'u' }, random: () => 0 }, o));

test('a dropped stream reconnects with Last-Event-ID and goes on', async (t) => {
  const lastIDs = [];
  const base = await serve(t, (req, res) => {
    if (req.method === 'POST') return json(res, 202, waiting('t1'));
    lastIDs.push(req.headers['last-event-id'] || '');
    sse(res);
    if (lastIDs.length === 1) {
      res.write('retry: 10\n\nid: 5\nevent: position\ndata: {"position":1,"waiting":1}\n\n');
      setTimeout(() => res.destroy(), 20);
    } else {
      res.write('id: 6\nevent: ready\ndata: {"token":"tok","readyAt":"2026-12-05T01:00:00Z","expiresAt":"2026-12-05T01:05:00Z"}\n\n');
    }
  });
  const log = [];
  const s = await client(base).wait('q', { onUpdate: (x) => log.push(`${x.status} ${x.position || ''} via ${x.via}`) });
  assert.deepEqual(lastIDs, ['', '5']);
  assert.deepEqual(log, ['WAITING 2 via join', 'WAITING 1 via stream', 'READY  via stream']);
  assert.equal(s.token, 'tok');
  assert.equal(s.ticket, 't1', 'the ready state keeps its ticket');
});

test('a stream silent past streamIdleMs is taken for dead and reopened', async (t) => {
  let opened = 0;
  const base = await serve(t, (req, res) => {
    if (req.method === 'POST') return json(res, 202, waiting('t1'));
    sse(res);
    if (++opened === 1) return res.flushHeaders(); // then nothing, not even a heartbeat
    res.write('event: ready\ndata: {"token":"tok"}\n\n');
  });
  const s = await client(base, { streamIdleMs: 150 }).wait('q');
  assert.equal(opened, 2);
  assert.equal(s.via, 'stream');
});

test('a ticket the notifier refuses is followed by polls alone', async (t) => {
  let streams = 0;
  let polls = 0;
  const base = await serve(t, (req, res) => {
    if (req.method === 'POST') return json(res, 202, waiting('t1', { pollAfterMs: 30 }));
    if (req.url.startsWith('/events')) {
      streams++;
      return json(res, 401, { type: 'https://usher.dev/problems/invalid-ticket', title: 'Unauthorized', status: 401 });
    }
    return json(res, 200, ++polls < 3 ? waiting('t1', { pollAfterMs: 30 }) : { ticket: 't1', queue: 'q', status: 'READY', token: 'tok', waiting: 0 });
  });
  const s = await client(base).wait('q');
  assert.equal(s.via, 'poll');
  assert.equal(streams, 1, 'the refused stream was asked again');
});

test('a ticket of a line reset since is joined again', async (t) => {
  const joins = [];
  const base = await serve(t, (req, res) => {
    if (req.method === 'POST') {
      joins.push(req.url);
      return json(res, 202, joins.length === 1 ? waiting('old', { pollAfterMs: 10 }) : { ticket: 'new', queue: 'q', status: 'READY', token: 'tok', waiting: 0 });
    }
    json(res, 410, { type: 'https://usher.dev/problems/ticket-stale', title: 'Gone', status: 410 });
  });
  const s = await client(base, { stream: false }).wait('q');
  assert.equal(joins.length, 2);
  assert.deepEqual([s.ticket, s.via], ['new', 'join']);
});

test('the stream\'s endings read as a poll says them', async (t) => {
  const tests = [
    { name: 'abandoned', event: '{"reason":"left","abandoned":true}', status: 'LEFT', reason: 'abandoned' },
    { name: 'left', event: '{"reason":"left"}', status: 'LEFT', reason: undefined },
    { name: 'used', event: '{"reason":"used"}', status: 'USED', reason: undefined },
    { name: 'sold out', event: '{"reason":"sold_out"}', status: 'CLOSED', reason: 'sold_out' },
  ];
  for (const tt of tests) {
    const base = await serve(t, (req, res) => {
      if (req.method === 'POST') return json(res, 202, waiting('t1'));
      sse(res);
      res.write('event: closed\ndata: ' + tt.event + '\n\n');
    });
    const err = await client(base).wait('q').catch((e) => e);
    assert.deepEqual([err.status, err.reason], [tt.status, tt.reason], tt.name);
  }
});

test('a notice taken down ({}) leaves the state', async (t) => {
  const base = await serve(t, (req, res) => {
    if (req.method === 'POST') return json(res, 202, waiting('t1'));
    sse(res);
    res.write('event: notice\ndata: {"message":"restock at 10:30","level":"info","since":"2026-12-05T01:00:00Z"}\n\n');
    res.write('event: notice\ndata: {}\n\nevent: ready\ndata: {"token":"tok"}\n\n');
  });
  const notices = [];
  await client(base).wait('q', { onUpdate: (s) => notices.push(s.notice ? s.notice.message : null) });
  assert.deepEqual(notices, [null, 'restock at 10:30', null, null]);
});

test('the backoff is full jitter below a doubling cap', () => {
  for (let attempt = 0; attempt < 40; attempt++) {
    const cap = Math.min(30000, 500 * 2 ** attempt);
    assert.equal(backoff(() => 0, attempt, 500, 30000), 0);
    const top = backoff(() => 0.999999, attempt, 500, 30000);
    assert.ok(top < cap && top >= cap * 0.99, `attempt ${attempt}: ${top} of ${cap}`);
  }
});

test('a gateway that cannot be reached is tried again, then the call fails with status 0', async () => {
  const tries = [];
  // Port 1 on loopback: nothing listens, the connection is refused at once.
  const usher = client('http://127.0.0.1:1', { retry: { attempts: 2, onRetry: (r) => tries.push([r.attempt, r.status, r.error && r.error.name]) } });
  const err = await usher.join('q').catch((e) => e);
  assert.equal(err.name, 'UsherError');
  assert.equal(err.status, 0);
  assert.deepEqual(tries, [[0, undefined, 'TypeError'], [1, undefined, 'TypeError']]);
});
