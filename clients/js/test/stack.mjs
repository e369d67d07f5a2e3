// The running stack the integration tests talk to, as the Go test that
// starts it (tools/e2e/clientjs_test.go) describes it in the environment:
//   USHER_GATEWAY_URL, USHER_NOTIFIER_URL, USHER_ADMIN_TOKEN, and
//   USHER_NOTIFIER_DOWN=1 once it has stopped the notifier.
// Without USHER_GATEWAY_URL (node --test on its own) those tests skip.

import { createClient } from '@usher/client';

export const gateway = process.env.USHER_GATEWAY_URL || '';
export const notifierDown = process.env.USHER_NOTIFIER_DOWN === '1';
const adminToken = process.env.USHER_ADMIN_TOKEN || '';

/** skip is node:test's skip option for tests that need the stack in this shape. */
export function skip({ notifier = 'up' } = {}) {
  if (!gateway) return 'no stack: run through go test -run ClientJS ./tools/e2e';
  if (notifier === 'up' && notifierDown) return 'the notifier is down in this run';
  if (notifier === 'down' && !notifierDown) return 'the notifier is up in this run';
  return false;
}

export const SKU = 'js-client-sku';

let made = 0;

/**
 * queue creates a queue of its own for one test (selling SKU, stocked),
 * with config on top of one slot and a 50 ms tick, and returns its name.
 */
export async function queue(config = {}) {
  await admin('PUT', '/v1/admin/stock/' + SKU, { available: 1000 });
  const name = 'js-' + process.pid + '-' + Date.now().toString(36) + '-' + ++made;
  await admin('PUT', '/v1/admin/queues/' + name, Object.assign({ targetActive: 1, tickMs: 50, sku: SKU }, config));
  return name;
}

async function admin(method, path, body) {
  const res = await fetch(gateway + path, {
    method, body: JSON.stringify(body), headers: { Authorization: 'Bearer ' + adminToken },
  });
  if (res.status >= 300) throw new Error(`${method} ${path} = ${res.status} ${await res.text()}`);
}

/**
 * recorder is a fetch that records every call — method, URL, headers, the
 * status (or the error), when it was made and answered, and its signal —
 * for tests that check what went on the wire.
 */
export function recorder() {
  const calls = [];
  const f = async (url, init = {}) => {
    const call = { method: init.method || 'GET', url: String(url), headers: Object.assign({}, init.headers), signal: init.signal, at: Date.now() };
    calls.push(call);
    try {
      const res = await fetch(url, init);
      call.status = res.status;
      call.answeredAt = Date.now();
      return res;
    } catch (err) {
      call.error = err;
      throw err;
    }
  };
  return { fetch: f, calls };
}

/** client is a client of the stack for user, with options on top. */
export function client(user, options = {}) {
  return createClient(Object.assign({ base: gateway, headers: { 'X-User-Id': user } }, options));
}

/**
 * holder takes q's one slot as user and returns the READY state: whoever
 * joins next waits behind them until they leave. An empty line admits at
 * once, or — a queue whose first admission tick has not run yet — a tick
 * later.
 */
export async function holder(q, user) {
  const s = await client(user).wait(q);
  if (s.status !== 'READY') throw new Error(`${user} in ${q}: ${s.status}, want READY in an empty line`);
  return s;
}

/** until polls cond every 20 ms until it holds, failing after ms. */
export async function until(cond, what, ms = 20000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await new Promise((r) => setTimeout(r, 20));
  }
}
