// @usher/client: usher's waiting room from a page, a single-page app or a
// Node program. It joins a queue (solving the proof of work when the queue
// asks for one), follows the ticket on the notifier's event stream with
// polls of the gateway while the stream is down, retries what a busy
// gateway turns away (exponential backoff with full jitter, never sooner
// than Retry-After), and, once READY, orders with the entry token or sends
// the shopper through the proxy gate's pass. No dependencies: fetch,
// AbortController and, in browsers, EventSource.
//
//   import { createClient } from '@usher/client';
//   const usher = createClient({ headers: { 'X-User-Id': 'alice' } });
//   const ready = await usher.wait('drop', { onUpdate: (s) => render(s) });
//   const order = await usher.order({ token: ready.token, sku: 'demo-sku' });
//
// The API it speaks is the gateway's /openapi.json (docs/api.md).

import { follow, ENDS } from './follow.js';
import { solve, header } from './pow.js';
import { backoff, sleep } from './retry.js';
import { retryAfterMs } from './sse.js';

/**
 * UsherError is a call usher refused, or a ticket that ended without READY.
 * `status` is the HTTP status (0: the gateway could not be reached) or the
 * ticket's ending status (EXPIRED, USED, LEFT, CLOSED); `type` the problem
 * type's name (`queue-closed`, `rate-limited`…); `reason` the problem's or
 * the ticket's reason (`sold_out`, `abandoned`…).
 */
export class UsherError extends Error {
  /**
   * @param {string} message
   * @param {{status: number | string, type?: string, reason?: string, problem?: any, state?: any, retryAfterMs?: number, cause?: unknown}} o
   */
  constructor(message, o) {
    super(message, o.cause === undefined ? undefined : { cause: o.cause });
    this.name = 'UsherError';
    this.status = o.status;
    this.type = o.type;
    this.reason = o.reason;
    this.problem = o.problem;
    this.state = o.state;
    this.retryAfterMs = o.retryAfterMs || 0;
  }
}

/**
 * createClient returns a client of one gateway, for one shopper (the
 * identity headers).
 *
 * @param {import('./usher.d.ts').ClientOptions} [options]
 * @returns {import('./usher.d.ts').Client}
 */
export function createClient(options = {}) {
  const cfg = settings(options);
  const deps = {
    join: (queue, o) => join(cfg, queue, o),
    request: (method, url, o) => request(cfg, method, url, o),
    problem: problemError,
    ticketURL: (queue, ticket) => ticketURL(cfg, queue, ticket),
  };
  return {
    join: (queue, o = {}) => join(cfg, queue, o),
    poll: (ref, o = {}) => poll(cfg, ref, o),
    follow: (queue, o = {}) => follow(cfg, queue, o, deps),
    wait: (queue, o = {}) => wait(follow(cfg, queue, o, deps), o),
    leave: (ref, o = {}) => leave(cfg, ref, o),
    order: (o) => order(cfg, o),
    passURL: (ref, returnTo) => passURL(cfg, ref, returnTo),
    enter: (ref, returnTo, o = {}) => enter(cfg, ref, returnTo, o),
    pageURL: (queue) => pageURL(cfg, queue),
  };
}

/** solveChallenge solves a proof-of-work challenge: see docs/api.md. */
export { solve as solveChallenge };

function settings(o) {
  const browser = typeof document !== 'undefined' && typeof location !== 'undefined';
  const base = (o.base || '').replace(/\/+$/, '');
  if (!base && !browser) throw new TypeError('usher: base (the gateway\'s URL) is required outside a browser');
  const languages = (o.languages || (browser ? pageLanguages() : [])).filter(isLanguageTag).slice(0, 10);
  const retry = Object.assign({ attempts: 8, baseMs: 500, maxMs: 30000, onRetry: null }, o.retry);
  const accept = acceptLanguage(languages);
  const userFetch = o.fetch;
  return {
    base,
    browser,
    languages,
    retry,
    headers: o.headers || {},
    fetch: userFetch ? (...a) => userFetch(...a) : (...a) => globalThis.fetch(...a),
    stream: o.stream === undefined ? 'auto' : o.stream,
    streamIdleMs: o.streamIdleMs || 45000,
    random: o.random || Math.random,
    powWorker: o.powWorker,
    origin: () => base || (browser ? location.href : undefined),
    languageHeader: () => (accept ? { 'Accept-Language': accept } : {}),
  };
}

// pageLanguages are the page's own language first (<html lang>), then the
// browser's: a shop that shows German shows its line in German.
function pageLanguages() {
  const out = [];
  const add = (t) => { if (t && !out.includes(t)) out.push(t); };
  add(document.documentElement && document.documentElement.lang);
  for (const t of (typeof navigator !== 'undefined' && navigator.languages) || []) add(t);
  return out;
}

function isLanguageTag(t) { return typeof t === 'string' && /^[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8})*$/.test(t); }

/**
 * acceptLanguage writes the tags, most wanted first, as an Accept-Language
 * value with falling q-values: de-AT, de;q=0.9, en;q=0.8.
 *
 * @param {string[]} tags
 */
export function acceptLanguage(tags) {
  return tags.map((t, i) => (i === 0 ? t : t + ';q=' + Math.max(0.1, 1 - i / 10).toFixed(1))).join(', ');
}

async function identity(cfg) {
  return typeof cfg.headers === 'function' ? await cfg.headers() : cfg.headers;
}

/**
 * request makes one call, trying again — up to o.attempts more times
 * (retry.attempts by default) — when the gateway cannot be reached or
 * answers 429 or 503: after Retry-After, when it says one, plus a full
 * jitter backoff, so a crowd told "1 s" does not come back in the same
 * millisecond. It resolves with the last answer, its JSON read.
 */
async function request(cfg, method, url, o = {}) {
  const attempts = o.attempts === undefined ? cfg.retry.attempts : o.attempts;
  for (let attempt = 0; ; attempt++) {
    const headers = Object.assign({}, cfg.languageHeader(), await identity(cfg), o.headers);
    let res;
    try {
      res = await cfg.fetch(url, { method, headers, body: o.body, signal: o.signal, cache: 'no-store', redirect: o.redirect || 'follow' });
    } catch (err) {
      if (o.signal && o.signal.aborted) throw o.signal.reason;
      if (attempt >= attempts) throw new UsherError('usher could not be reached: ' + (err && err.message), { status: 0, cause: err });
      await pause(cfg, { attempt, method, url, error: err, retryAfterMs: 0 }, o.signal);
      continue;
    }
    let data = null;
    try { data = await res.json(); } catch { /* 204, or not JSON */ }
    const after = retryAfterMs(res.headers.get('Retry-After'));
    if ((res.status === 429 || res.status === 503) && attempt < attempts) {
      await pause(cfg, { attempt, method, url, status: res.status, retryAfterMs: after }, o.signal);
      continue;
    }
    return { status: res.status, ok: res.ok, type: res.type, data, retryAfterMs: after, headers: res.headers };
  }
}

function pause(cfg, info, signal) {
  const delayMs = info.retryAfterMs + backoff(cfg.random, info.attempt, cfg.retry.baseMs, cfg.retry.maxMs);
  if (cfg.retry.onRetry) cfg.retry.onRetry(Object.assign({ delayMs }, info));
  return sleep(delayMs, signal);
}

function problemError(r) {
  const d = r.data || {};
  const type = typeof d.type === 'string' ? d.type.replace(/^.*\//, '') : undefined;
  return new UsherError(d.detail || d.title || 'HTTP ' + r.status, { status: r.status, type, reason: d.reason, problem: d, retryAfterMs: r.retryAfterMs });
}

function ticketsURL(cfg, queue) { return cfg.base + '/v1/queues/' + encodeURIComponent(queue) + '/tickets'; }

function ticketURL(cfg, queue, ticket) { return ticketsURL(cfg, queue) + '/' + encodeURIComponent(ticket); }

/**
 * join asks for a place in line. A queue that asks for a proof of work
 * answers 428 with a challenge: it is solved and the join sent again with
 * the Usher-PoW header (three times at most: a challenge can expire while
 * a slow device solves it).
 */
async function join(cfg, queue, o) {
  let proof = '';
  for (let tries = 0; ; tries++) {
    const headers = {};
    if (proof) headers['Usher-PoW'] = proof;
    if (o.invite) headers['Usher-Invite'] = o.invite;
    const r = await request(cfg, 'POST', ticketsURL(cfg, queue), { headers, signal: o.signal });
    if (r.ok) return r.data;
    const ch = r.data && r.data.challenge;
    if (r.status === 428 && ch && tries < 3) {
      const nonce = await solve(ch.challenge, ch.difficulty, { signal: o.signal, onProgress: o.onProgress, worker: cfg.powWorker });
      proof = header(ch.challenge, nonce);
      continue;
    }
    throw problemError(r);
  }
}

async function poll(cfg, ref, o) {
  const r = await request(cfg, 'GET', ticketURL(cfg, ref.queue, ref.ticket), { signal: o.signal });
  if (!r.ok) throw problemError(r);
  return Object.assign({}, r.data, { via: 'poll' });
}

async function leave(cfg, ref, o) {
  const r = await request(cfg, 'DELETE', ticketURL(cfg, ref.queue, ref.ticket), { signal: o.signal });
  if (!r.ok) throw problemError(r);
}

/**
 * wait takes the states of a follow until READY with its token (returned)
 * or an ending (thrown as an UsherError whose status is the ending's);
 * leaving the loop closes the stream.
 */
async function wait(states, o) {
  for await (const s of states) {
    if (o.onUpdate) o.onUpdate(s);
    if (s.status === 'READY' && s.token) return s;
    if (ENDS.includes(s.status)) {
      throw new UsherError(s.status + (s.reason ? ' (' + s.reason + ')' : ''), { status: s.status, reason: s.reason, state: s });
    }
  }
  throw new UsherError('the ticket\'s states ended without an answer', { status: 0 });
}

/**
 * order places the order the entry token allows and follows it until it
 * is final (PAID, FAILED or REJECTED, with a reason). The order's id is
 * the token's: sending it again, after a lost answer, is the same order.
 */
async function order(cfg, o) {
  if (!o || !o.token) throw new TypeError('usher: order needs the entry token');
  const r = await request(cfg, 'POST', cfg.base + '/v1/orders', {
    headers: { Authorization: 'Bearer ' + o.token, 'Content-Type': 'application/json' },
    body: JSON.stringify({ sku: o.sku, quantity: o.quantity || 1 }),
    signal: o.signal,
  });
  if (!r.ok) throw problemError(r);
  let ord = r.data;
  for (let every = 250; ord.status === 'PENDING'; every = Math.min(2 * every, 2000)) {
    await sleep(every, o.signal);
    const p = await request(cfg, 'GET', cfg.base + '/v1/orders/' + encodeURIComponent(ord.orderId), { signal: o.signal });
    if (!p.ok) throw problemError(p);
    ord = p.data;
  }
  return ord;
}

/**
 * passURL is where a READY shopper gets the proxy gate's pass — a cookie
 * for the shop's domain — and is sent on to returnTo (a URL of the shop
 * the gate protects). It carries the ticket in its query; enter keeps it
 * out of URLs (and so out of logs and history).
 */
function passURL(cfg, ref, returnTo) {
  return cfg.base + '/v1/gate/pass?ticket=' + encodeURIComponent(ref.ticket) + '&return=' + encodeURIComponent(returnURL(cfg, returnTo));
}

function returnURL(cfg, returnTo) {
  return returnTo === undefined && cfg.browser ? location.href : String(returnTo);
}

/**
 * enter gets the gate's pass and goes to returnTo: it posts the ticket and
 * the return URL as a form — with the shopper's identity headers, which a
 * page's own form could not send (the shop's user JWT) — the browser keeps
 * the cookie of the gateway's answer (a redirect to returnTo, not
 * followed), and the page then goes to returnTo itself. A refusal (409 not-ready, 403 another user's ticket,
 * 400 a return URL the gate does not allow) rejects, and nothing moves.
 */
async function enter(cfg, ref, returnTo, o) {
  if (!cfg.browser) throw new TypeError('usher: enter navigates a browser; elsewhere use passURL');
  const back = returnURL(cfg, returnTo);
  const r = await request(cfg, 'POST', cfg.base + '/v1/gate/pass', {
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ ticket: ref.ticket, return: back }).toString(),
    redirect: 'manual',
    signal: o.signal,
  });
  // A browser shows a redirect it did not follow as an opaque one.
  if (r.type !== 'opaqueredirect' && !(r.status >= 300 && r.status < 400)) throw problemError(r);
  location.assign(back);
}

/** pageURL is the queue's waiting-room page, in the client's first language. */
function pageURL(cfg, queue) {
  const u = cfg.base + '/q/' + encodeURIComponent(queue);
  return cfg.languages.length ? u + '?lang=' + encodeURIComponent(cfg.languages[0]) : u;
}
