// Server-Sent Events over fetch, for runtimes without EventSource (Node 20
// has none): a parser of text/event-stream as the WHATWG HTML standard
// defines it (§9.2.6), and one connection's reader. Reconnecting, with
// Last-Event-ID and a backoff, is the caller's (follow.js), as it decides
// what to do meanwhile.

/**
 * @typedef {{type: string, data: string, lastEventId: string}} SSEEvent
 */

/**
 * SSEParser turns the text of an event stream, in chunks split anywhere,
 * into events. It keeps what a reconnection needs: the last event id (sent
 * back as Last-Event-ID) and the server's retry hint.
 */
export class SSEParser {
  /** @param {(ev: SSEEvent) => void} onEvent */
  constructor(onEvent) {
    this.onEvent = onEvent;
    /** @type {string} the id of the last event that had one: Last-Event-ID */
    this.lastEventId = '';
    /** @type {number | undefined} the server's reconnection time, ms */
    this.retry = undefined;
    this.rest = '';
    this.skipLF = false; // a chunk ended with CR: a LF opening the next is the same line end
    this.type = '';
    /** @type {string[]} */
    this.data = [];
    this.fresh = true; // at the start of a stream: a BOM is dropped
  }

  /** begin readies the parser for a new connection (ids and retry kept). */
  begin() {
    this.rest = '';
    this.skipLF = false;
    this.type = '';
    this.data = [];
    this.fresh = true;
  }

  /** @param {string} chunk decoded text, any length */
  push(chunk) {
    let s = this.rest + chunk;
    this.rest = '';
    if (this.fresh && s.length > 0) {
      this.fresh = false;
      if (s.charCodeAt(0) === 0xfeff) s = s.slice(1);
    }
    let i = 0;
    if (this.skipLF && s.length > 0) {
      this.skipLF = false;
      if (s[0] === '\n') i = 1;
    }
    let start = i;
    for (; i < s.length; i++) {
      const ch = s[i];
      if (ch !== '\n' && ch !== '\r') continue;
      this.line(s.slice(start, i));
      if (ch === '\r') {
        if (i + 1 === s.length) this.skipLF = true;
        else if (s[i + 1] === '\n') i++;
      }
      start = i + 1;
    }
    this.rest = s.slice(start);
  }

  /** @param {string} line one line, without its end */
  line(line) {
    if (line === '') return this.dispatch();
    if (line[0] === ':') return; // a comment: the notifier's heartbeat
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value[0] === ' ') value = value.slice(1);
    switch (field) {
      case 'event': this.type = value; break;
      case 'data': this.data.push(value); break;
      case 'id': if (!value.includes('\0')) this.lastEventId = value; break;
      case 'retry': if (/^[0-9]+$/.test(value)) this.retry = Number(value); break;
      default: // ignored, as the standard says
    }
  }

  dispatch() {
    const type = this.type || 'message';
    const data = this.data;
    this.type = '';
    this.data = [];
    if (data.length === 0) return; // no data: no event
    this.onEvent({ type, data: data.join('\n'), lastEventId: this.lastEventId });
  }
}

/**
 * StreamRefused is a stream the server answered with something other than
 * an event stream: a problem (401 a ticket it does not know, 410 a line
 * reset since) or a busy server (503 with Retry-After).
 */
export class StreamRefused extends Error {
  /**
   * @param {number} status
   * @param {number} retryAfterMs
   * @param {any} problem
   */
  constructor(status, retryAfterMs, problem) {
    super((problem && (problem.detail || problem.title)) || 'event stream answered HTTP ' + status);
    this.name = 'StreamRefused';
    this.status = status;
    this.retryAfterMs = retryAfterMs;
    this.problem = problem;
  }
}

/**
 * readStream opens one connection to an event stream and feeds the parser
 * until the server ends it (it resolves), the connection fails, the
 * stream goes quiet for idleMs — heartbeats included, so a connection that
 * died without a word is found — or signal aborts (it rejects).
 *
 * @param {object} o
 * @param {typeof fetch} o.fetch
 * @param {string} o.url
 * @param {Record<string, string>} o.headers
 * @param {SSEParser} o.parser
 * @param {AbortSignal} o.signal
 * @param {number} o.idleMs
 * @param {() => void} o.onOpen called once the server answered with a stream
 * @returns {Promise<void>}
 */
export async function readStream({ fetch, url, headers, parser, signal, idleMs, onOpen }) {
  const ctl = new AbortController();
  const stop = () => ctl.abort(signal.reason);
  if (signal.aborted) throw signal.reason;
  signal.addEventListener('abort', stop, { once: true });
  let timer;
  const quiet = () => {
    clearTimeout(timer);
    timer = setTimeout(() => ctl.abort(new Error('event stream silent for ' + idleMs + ' ms')), idleMs);
  };
  try {
    const h = Object.assign({}, headers, { Accept: 'text/event-stream' });
    if (parser.lastEventId) h['Last-Event-ID'] = parser.lastEventId;
    quiet();
    const res = await fetch(url, { headers: h, signal: ctl.signal, cache: 'no-store' });
    const type = res.headers.get('Content-Type') || '';
    if (res.status !== 200 || !type.startsWith('text/event-stream') || !res.body) {
      let problem = null;
      try { problem = await res.json(); } catch { /* not JSON */ }
      throw new StreamRefused(res.status, retryAfterMs(res.headers.get('Retry-After')), problem);
    }
    parser.begin();
    onOpen();
    const reader = res.body.getReader();
    const text = new TextDecoder();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        quiet();
        parser.push(text.decode(value, { stream: true }));
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  } catch (err) {
    throw signal.aborted ? signal.reason : err;
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', stop);
    ctl.abort();
  }
}

/**
 * retryAfterMs reads a Retry-After header: delay-seconds, or an HTTP date
 * (RFC 9110 §10.2.3); 0 when absent or unreadable.
 *
 * @param {string | null} v
 * @param {number} [now] ms since the epoch
 */
export function retryAfterMs(v, now = Date.now()) {
  if (!v) return 0;
  if (/^[0-9]+$/.test(v.trim())) return Number(v.trim()) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? 0 : Math.max(0, at - now);
}
