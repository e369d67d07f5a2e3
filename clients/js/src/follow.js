// Following a ticket: the notifier's event stream while it is open, polls
// of the gateway at pollAfterMs while it is not, a new join when the line
// was reset, until the ticket ends.

import { SSEParser, StreamRefused, readStream } from './sse.js';
import { backoff, sleep } from './retry.js';

/** The statuses a ticket ends with: nothing follows them. */
export const ENDS = ['EXPIRED', 'USED', 'LEFT', 'CLOSED'];

// The notifier's events (docs/api.md, "Push: Server-Sent Events").
const EVENTS = ['prequeue', 'position', 'stock', 'notice', 'ready', 'expired', 'closed'];

/**
 * @typedef {object} Deps what the follower needs of the client
 * @property {(queue: string, o: object) => Promise<any>} join a join, with its proof of work
 * @property {(method: string, url: string, o: object) => Promise<any>} request one call, retried as told
 * @property {(r: any) => Error} problem the error of a refused call
 * @property {(queue: string, ticket: string) => string} ticketURL
 */

/**
 * follow yields the ticket's states: the join's answer (or, resuming with
 * o.ticket, a poll's), then each change the stream or the polls tell, and
 * ends after an ending status. The stream opens only once the first state
 * has been taken and more is asked for.
 *
 * @param {any} cfg the client's settings
 * @param {string} queue
 * @param {any} o follow's options
 * @param {Deps} deps
 */
export async function* follow(cfg, queue, o, deps) {
  let first;
  if (o.ticket) {
    const r = await deps.request('GET', deps.ticketURL(queue, o.ticket), { signal: o.signal });
    if (!r.ok) throw deps.problem(r);
    first = r.data;
  } else {
    first = await deps.join(queue, o);
  }
  const f = new Follower(cfg, queue, o, deps);
  try {
    f.take(first, o.ticket ? 'poll' : 'join');
    for (;;) {
      const s = await f.next();
      if (!s) return;
      yield s;
    }
  } finally {
    f.close();
  }
}

/**
 * Follower gathers what the stream and the polls say into states, which
 * next() hands out in order. Invariant: while it lives, either a stream is
 * open or polls are scheduled (or a poll is in flight), never neither.
 */
class Follower {
  constructor(cfg, queue, o, deps) {
    this.cfg = cfg;
    this.queue = queue;
    this.o = o;
    this.deps = deps;
    this.state = null;
    this.items = [];
    this.waiter = null;
    this.error = null;
    this.ended = false;
    this.started = false;
    this.life = new AbortController(); // the follower's: every call it makes
    this.conn = null; // the current ticket's: its stream and polls
    this.polling = null; // {timer} while polls are on
    this.pollFailures = 0;
    this.rejoining = false;
    this.onAbort = () => this.fail(o.signal.reason);
    if (o.signal) {
      if (o.signal.aborted) this.fail(o.signal.reason);
      else o.signal.addEventListener('abort', this.onAbort, { once: true });
    }
  }

  live() { return !this.ended && !this.error; }

  /** @returns {Promise<any>} the next state, or undefined once it ended */
  next() {
    if (!this.started && this.live()) {
      this.started = true;
      this.listen();
    }
    if (this.items.length) return Promise.resolve(this.items.shift());
    if (this.error) return Promise.reject(this.error);
    if (this.ended) return Promise.resolve(undefined);
    return new Promise((resolve, reject) => { this.waiter = { resolve, reject }; });
  }

  emit(s) {
    const w = this.waiter;
    this.waiter = null;
    if (w) w.resolve(s); else this.items.push(s);
  }

  finish() {
    this.ended = true;
    this.stop();
    const w = this.waiter;
    this.waiter = null;
    if (w) w.resolve(undefined);
  }

  fail(err) {
    if (!this.live()) return;
    this.error = err;
    this.stop();
    const w = this.waiter;
    this.waiter = null;
    if (w) w.reject(err);
  }

  close() {
    this.ended = true;
    this.stop();
    if (this.o.signal) this.o.signal.removeEventListener('abort', this.onAbort);
  }

  stop() {
    this.stopPolling();
    if (this.conn) this.conn.abort();
    this.life.abort();
  }

  /**
   * take makes the next state of an answer or an event's data: a join's
   * or a poll's answer is the whole state; an event with a status is a new
   * status (keeping the ticket, its URLs and the notice), one without a
   * change to the current state. A poll that changes nothing is not told.
   */
  take(s, via, status) {
    if (!this.live()) return;
    const prev = this.state;
    let next;
    if (via !== 'stream') next = Object.assign({}, s);
    else if (status) next = Object.assign({ ticket: prev.ticket, queue: prev.queue, events: prev.events, pollAfterMs: prev.pollAfterMs, notice: prev.notice }, s, { status });
    else next = Object.assign({}, prev, s);
    if (!next.notice || !next.notice.message) delete next.notice; // {}: taken down
    next.via = via;
    this.state = next;
    if (via === 'poll' && prev && same(prev, next)) return;
    this.emit(next);
    if (ENDS.includes(next.status)) this.finish();
  }

  onEvent(type, data) {
    let d;
    try { d = JSON.parse(data); } catch { return; }
    switch (type) {
      case 'prequeue': return this.take(d, 'stream', 'PRE_QUEUE');
      case 'position': return this.take(d, 'stream', this.state.status === 'WAITING' ? '' : 'WAITING');
      case 'stock': return this.take(d, 'stream');
      case 'notice': return this.take({ notice: d }, 'stream');
      case 'ready': return this.take(d, 'stream', 'READY');
      case 'expired': return this.take(d, 'stream', 'EXPIRED');
      case 'closed': return this.take(...closed(d));
      default: // an event this client does not know yet
    }
  }

  /** listen follows the current ticket: its stream, polls meanwhile. */
  listen() {
    if (!this.live()) return;
    this.conn = new AbortController();
    const conn = this.conn.signal;
    this.startPolling();
    const mode = this.cfg.stream === 'auto' ? (typeof EventSource === 'function' ? 'eventsource' : 'fetch') : this.cfg.stream;
    if (!this.state.events || !mode) return; // polls only
    const url = new URL(this.state.events, this.cfg.origin()).href;
    if (mode === 'eventsource') this.eventSource(url, conn);
    else this.fetchStream(url, conn).catch((err) => this.fail(err));
  }

  /** eventSource follows the stream with the browser's EventSource. */
  eventSource(url, conn) {
    let attempt = 0;
    let es = null;
    let timer;
    const open = () => {
      if (conn.aborted) return;
      es = new EventSource(url);
      es.onopen = () => { attempt = 0; this.stopPolling(); };
      es.onerror = () => {
        this.startPolling(); // the browser reconnects by itself (Last-Event-ID)…
        if (es.readyState !== 2) return;
        es.close(); // …but not after an answer that is no stream: later, anew
        timer = setTimeout(open, backoff(this.cfg.random, attempt++, this.cfg.retry.baseMs * 4, this.cfg.retry.maxMs));
      };
      for (const name of EVENTS) es.addEventListener(name, (e) => this.onEvent(name, e.data));
    };
    conn.addEventListener('abort', () => { clearTimeout(timer); if (es) es.close(); }, { once: true });
    open();
  }

  /**
   * fetchStream follows the stream over fetch, reconnecting with the last
   * event id after a backoff (the server's retry hint its base, Retry-After
   * its floor), and polling while it is down. A ticket the notifier
   * refuses for good (a shadow line's, say) is polled only; one of a line
   * reset since is joined again.
   */
  async fetchStream(url, conn) {
    const parser = new SSEParser((ev) => this.onEvent(ev.type, ev.data));
    for (let attempt = 0; !conn.aborted && this.live();) {
      let opened = false;
      let floor = 0;
      try {
        await readStream({
          fetch: this.cfg.fetch, url, headers: this.cfg.languageHeader(), parser, signal: conn,
          idleMs: this.cfg.streamIdleMs, onOpen: () => { opened = true; this.stopPolling(); },
        });
      } catch (err) {
        if (conn.aborted || !this.live()) return;
        if (err instanceof StreamRefused) {
          if (err.status === 410) return this.rejoin();
          if (err.status !== 429 && err.status < 500) return; // polls only
          floor = err.retryAfterMs;
        }
      }
      if (conn.aborted || !this.live()) return;
      this.startPolling();
      attempt = opened ? 0 : attempt + 1;
      const ms = floor + backoff(this.cfg.random, attempt, parser.retry || this.cfg.retry.baseMs, this.cfg.retry.maxMs);
      try { await sleep(ms, conn); } catch { return; }
    }
  }

  pollDelay() { return (this.state && this.state.pollAfterMs) || 1000; }

  startPolling() {
    if (this.polling || !this.live()) return;
    const p = { timer: null };
    this.polling = p;
    p.timer = setTimeout(() => this.pollOnce(p), this.pollDelay());
  }

  stopPolling() {
    if (this.polling) clearTimeout(this.polling.timer);
    this.polling = null;
  }

  /**
   * pollOnce asks the gateway once and schedules the next: at pollAfterMs,
   * at Retry-After (and a jitter) when it is busy, after a growing backoff
   * while it cannot be reached. A poll that finds the stream opened since
   * (polls stopped or restarted) is dropped: the stream is newer.
   */
  async pollOnce(p) {
    let delay = 0;
    try {
      const r = await this.deps.request('GET', this.deps.ticketURL(this.queue, this.state.ticket), { attempts: 0, signal: this.life.signal });
      if (p !== this.polling) return;
      this.pollFailures = 0;
      if (r.ok) this.take(r.data, 'poll');
      else if (r.status === 429 || r.status === 503) delay = r.retryAfterMs + backoff(this.cfg.random, 0, this.cfg.retry.baseMs, this.cfg.retry.maxMs);
      else if (r.status === 410 && /ticket-stale$/.test((r.data && r.data.type) || '')) return this.rejoin();
      else return this.fail(this.deps.problem(r));
    } catch (err) {
      if (!this.live() || p !== this.polling) return;
      delay = backoff(this.cfg.random, this.pollFailures++, this.cfg.retry.baseMs, this.cfg.retry.maxMs);
    }
    if (p === this.polling && this.live()) p.timer = setTimeout(() => this.pollOnce(p), delay || this.pollDelay());
  }

  /** rejoin joins again after the line was reset, and follows the new ticket. */
  async rejoin() {
    if (this.rejoining || !this.live()) return;
    this.rejoining = true;
    this.stopPolling();
    if (this.conn) this.conn.abort();
    try {
      const s = await this.deps.join(this.queue, Object.assign({}, this.o, { signal: this.life.signal }));
      this.take(s, 'join');
      this.listen();
    } catch (err) {
      this.fail(err);
    } finally {
      this.rejoining = false;
    }
  }
}

/**
 * closed reads the stream's closed event as a poll would say it: reason
 * used is USED, left is LEFT (abandoned: LEFT with reason abandoned), any
 * other reason CLOSED with it.
 *
 * @returns {[any, 'stream', string]}
 */
function closed(d) {
  if (d.reason === 'used') return [{}, 'stream', 'USED'];
  if (d.reason === 'left') return [d.abandoned ? { reason: 'abandoned' } : {}, 'stream', 'LEFT'];
  return [{ reason: d.reason }, 'stream', 'CLOSED'];
}

// same reports whether two states say the same, but for when to poll
// next (pollAfterMs is jittered) and where they came from.
function same(a, b) {
  const key = (s) => JSON.stringify(Object.assign({}, s, { via: '', pollAfterMs: 0 }));
  return key(a) === key(b);
}
