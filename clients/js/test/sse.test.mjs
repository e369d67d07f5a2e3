// The event-stream parser reads text/event-stream as the WHATWG HTML
// standard defines it, however the bytes are cut into chunks.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { SSEParser, retryAfterMs } from '../src/sse.js';

function parse(chunks) {
  const events = [];
  const p = new SSEParser((ev) => events.push(ev));
  for (const c of chunks) p.push(c);
  return { events, p };
}

// What the notifier sends (docs/api.md), in every line-end style.
const stream = 'retry: 2000\n\nid: 1\nevent: position\ndata: {"position":42}\n\n: hb\n\nid: 2\nevent: ready\ndata: {"token":"t"}\n\n';

test('events, ids and the retry hint of the notifier\'s stream', () => {
  const { events, p } = parse([stream]);
  assert.deepEqual(events, [
    { type: 'position', data: '{"position":42}', lastEventId: '1' },
    { type: 'ready', data: '{"token":"t"}', lastEventId: '2' },
  ]);
  assert.equal(p.lastEventId, '2');
  assert.equal(p.retry, 2000);
});

test('any cut of the stream into chunks gives the same events', () => {
  const want = parse([stream]).events;
  for (const text of [stream, stream.replaceAll('\n', '\r\n'), stream.replaceAll('\n', '\r')]) {
    for (let cut = 0; cut <= text.length; cut++) {
      assert.deepEqual(parse([text.slice(0, cut), text.slice(cut)]).events, want, `cut at ${cut}`);
    }
    assert.deepEqual(parse([...text]).events, want, 'one character a chunk');
  }
});

test('the standard\'s corner cases', () => {
  const tests = [
    { name: 'no data, no event', in: 'event: x\n\n', want: [] },
    { name: 'default type message', in: 'data: a\n\n', want: [{ type: 'message', data: 'a', lastEventId: '' }] },
    { name: 'data lines join with LF', in: 'data: a\ndata\ndata: b\n\n', want: [{ type: 'message', data: 'a\n\nb', lastEventId: '' }] },
    { name: 'one space after the colon is dropped, no more', in: 'data:  a\n\n', want: [{ type: 'message', data: ' a', lastEventId: '' }] },
    { name: 'an id with NUL is ignored', in: 'id: 1\ndata: a\n\nid: 2\0\ndata: b\n\n', want: [{ type: 'message', data: 'a', lastEventId: '1' }, { type: 'message', data: 'b', lastEventId: '1' }] },
    { name: 'unknown fields and comments are ignored', in: ':c\nfoo: bar\ndata: a\n\n', want: [{ type: 'message', data: 'a', lastEventId: '' }] },
    { name: 'a BOM opens the stream', in: '\ufeffdata: a\n\n', want: [{ type: 'message', data: 'a', lastEventId: '' }] },
    { name: 'an event without its blank line is not dispatched', in: 'data: a\n', want: [] },
  ];
  for (const tt of tests) assert.deepEqual(parse([tt.in]).events, tt.want, tt.name);
  assert.equal(parse(['retry: 1x\n']).p.retry, undefined, 'retry that is not digits');
});

test('Retry-After in seconds or as an HTTP date', () => {
  const now = Date.parse('2026-12-05T01:00:00Z');
  assert.equal(retryAfterMs('2', now), 2000);
  assert.equal(retryAfterMs('Sat, 05 Dec 2026 01:00:03 GMT', now), 3000);
  assert.equal(retryAfterMs('Sat, 05 Dec 2026 00:00:00 GMT', now), 0);
  assert.equal(retryAfterMs(null, now), 0);
  assert.equal(retryAfterMs('soon', now), 0);
});
