// With the notifier stopped (tools/e2e/clientjs_test.go stops it, then runs
// this file again), the client follows the ticket with polls at
// pollAfterMs to READY, and the order goes through.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { SKU, client, holder, queue, recorder, skip, until } from './stack.mjs';

test('with the notifier down, polls carry the shopper to READY', { skip: skip({ notifier: 'down' }) }, async () => {
  const q = await queue();
  const ahead = await holder(q, 'quinn');
  const rec = recorder();
  const log = [];
  const rae = client('rae', { fetch: rec.fetch });
  const ready = rae.wait(q, { onUpdate: (s) => log.push(`${s.status} via ${s.via}`) });
  await until(() => rec.calls.some((c) => c.url.endsWith('/events') && c.error), 'a refused stream');
  await until(() => rec.calls.some((c) => c.method === 'GET' && !c.url.endsWith('/events') && c.status === 200), 'a poll');
  await client('quinn').leave(ahead);
  const s = await ready;
  assert.equal(log[0], 'WAITING via join');
  assert.equal(s.via, 'poll');
  const order = await rae.order({ token: s.token, sku: SKU });
  assert.equal(order.status, 'PAID', JSON.stringify(order));
});
