// usher's browser client, the snippet a shop copies: join a queue (with the
// proof of work if the queue asks for one), wait on the notifier's stream
// (Server-Sent Events) with polling as the fallback, order with the entry
// token once READY. Plain JavaScript, no dependencies, no build step; the
// contract it speaks is /openapi.json.
//
//   <script src="/q/static/pow.js"></script>  <!-- only for queues with proof of work -->
//   <script src="usher.js"></script>
//   <script>
//     const headers = {'X-User-Id': 'alice'}; // or your proxy sets it, or X-User-Token
//     const ready = await Usher.wait({queue: 'drop', headers, onUpdate: (s) => render(s)});
//     const order = await Usher.order({token: ready.token, headers, sku: 'demo-sku'});
//   </script>
//
// The page must reach the gateway on its own origin (`base` otherwise: the
// gateway sends no CORS headers); the notifier's stream may be elsewhere, as
// the join answer's `events` says (allowed by USHER_NOTIFIER_CORS_ORIGINS).
(function (root) {
  'use strict';

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // call makes one request; the answer's JSON (a problem document on
  // errors) is data.
  async function call(method, url, headers, body) {
    const res = await fetch(url, { method, headers, body, cache: 'no-store' });
    let data = null;
    try { data = await res.json(); } catch (e) { /* 204, or not JSON */ }
    return { status: res.status, ok: res.ok, data, retryAfter: Number(res.headers.get('Retry-After')) || 0 };
  }

  function problem(r) {
    const d = r.data || {};
    const err = new Error(d.detail || d.title || 'HTTP ' + r.status);
    err.status = r.status;
    err.problem = d; // type, detail, … (see /openapi.json)
    err.reason = d.reason;
    return err;
  }

  // wait joins the queue and resolves with the ticket's state once READY
  // ({status: 'READY', token, readyAt, expiresAt, …}). It rejects with an
  // Error whose `status` is the HTTP status (410: the queue is closed or
  // sold out, or the drop ended — err.problem.type) or the ticket's end:
  // EXPIRED, USED, LEFT (`reason` `abandoned` when it went quiet too long),
  // CLOSED (`reason`: `closed`, `sold_out`, `ended`). onUpdate(state) sees
  // every state on the way: PRE_QUEUE (`opensAt`), WAITING (`position`,
  // `waiting`, `etaSeconds`), `notice` ({} once taken down), `stock`;
  // state.via is 'join', 'stream' or 'poll'.
  function wait(opts) {
    const base = (opts.base || '') + '/v1/queues/' + encodeURIComponent(opts.queue) + '/tickets';
    const headers = opts.headers || {};
    const onUpdate = opts.onUpdate || function () {};
    let state = {};
    let es = null;
    let pollTimer = null;
    let finished = false;

    return new Promise((resolve, reject) => {
      const finish = (err, value) => {
        if (finished) return;
        finished = true;
        if (es) es.close();
        clearTimeout(pollTimer);
        if (err) reject(err); else resolve(value);
      };
      // apply takes a join or poll answer (the whole state), or an event's
      // data: a new status (carrying on the ticket, its URLs, the notice) or
      // a change to the current one.
      const apply = (s, via, status) => {
        if (finished) return;
        if (via !== 'stream') state = Object.assign({}, s, { via });
        else if (status) state = Object.assign({ ticket: state.ticket, events: state.events, pollAfterMs: state.pollAfterMs, notice: state.notice }, s, { status, via });
        else state = Object.assign({}, state, s, { via });
        onUpdate(state);
        if (state.status === 'READY' && state.token) return finish(null, state);
        if (['EXPIRED', 'USED', 'LEFT', 'CLOSED'].includes(state.status)) {
          const err = new Error(state.status + (state.reason ? ' (' + state.reason + ')' : ''));
          err.status = state.status;
          err.reason = state.reason;
          finish(err);
        }
      };

      // join asks once; a queue that wants proof of work answers 428 with
      // a challenge, which pow.js (UsherPoW, the gateway's /q/static/pow.js)
      // solves, and the join goes again with the Usher-PoW header.
      const join = async () => {
        let pow = null;
        for (let attempt = 0; ; attempt++) {
          const h = Object.assign({}, headers);
          if (pow) h['Usher-PoW'] = pow;
          const r = await call('POST', base, h);
          if (r.ok) return r.data;
          const ch = r.data && r.data.challenge;
          if (r.status === 428 && ch && root.UsherPoW && attempt < 3) {
            const nonce = await root.UsherPoW.solve(ch.challenge, ch.difficulty, { onProgress: opts.onProgress });
            pow = root.UsherPoW.header(ch.challenge, nonce);
            continue;
          }
          if ((r.status === 429 || r.status === 503) && attempt < 10) { // busy: come back later
            await sleep((r.retryAfter || 2) * 1000);
            continue;
          }
          throw problem(r);
        }
      };

      // poll runs while the stream is down, every pollAfterMs.
      const poll = () => {
        if (pollTimer || finished) return;
        const loop = async () => {
          let delay = 0;
          try {
            const r = await call('GET', base + '/' + encodeURIComponent(state.ticket), headers);
            if (r.ok) apply(r.data, 'poll');
            else if (r.status === 429 || r.status === 503) delay = (r.retryAfter || 2) * 1000;
            else if (r.status === 410 && /ticket-stale$/.test((r.data || {}).type)) {
              // The line was reset (its epoch changed): join it again.
              try { apply(await join(), 'join'); } catch (e) { return finish(e); }
            } else return finish(problem(r));
          } catch (e) { /* offline: try again */ }
          const streaming = es && es.readyState === 1; // EventSource.OPEN
          pollTimer = finished || streaming ? null : setTimeout(loop, delay || state.pollAfterMs || 1000);
        };
        pollTimer = setTimeout(loop, state.pollAfterMs || 1000);
      };
      const stopPolling = () => { clearTimeout(pollTimer); pollTimer = null; };

      // listen opens the notifier's stream; while it is down, poll.
      const listen = () => {
        if (finished) return;
        if (!state.events || !root.EventSource || opts.stream === false) return poll();
        es = new EventSource(new URL(state.events, opts.base || location.href));
        es.onopen = stopPolling;
        es.onerror = () => {
          poll(); // the browser reconnects by itself; a CLOSED stream is given up
          if (es.readyState === 2) { es = null; setTimeout(listen, 15000); }
        };
        const on = (name, f) => es.addEventListener(name, (e) => f(JSON.parse(e.data)));
        on('prequeue', (d) => apply(d, 'stream', 'PRE_QUEUE'));
        on('position', (d) => apply(d, 'stream', state.status === 'WAITING' ? '' : 'WAITING'));
        on('stock', (d) => apply(d, 'stream'));
        on('notice', (d) => apply({ notice: d }, 'stream'));
        on('ready', (d) => apply(d, 'stream', 'READY'));
        on('expired', (d) => apply(d, 'stream', 'EXPIRED'));
        // An abandoned shopper's stream says left + abandoned; a poll says
        // LEFT, reason abandoned: the same end either way.
        on('closed', (d) => apply(d.abandoned ? Object.assign({}, d, { reason: 'abandoned' }) : d, 'stream',
          d.reason === 'used' ? 'USED' : d.reason === 'left' ? 'LEFT' : 'CLOSED'));
      };

      join().then((s) => { apply(s, 'join'); listen(); }, finish);
    });
  }

  // order places an order with the entry token and follows it until it is
  // final: resolves with {orderId, status: 'PAID' | 'FAILED' | 'REJECTED',
  // reason, …}; rejects with the problem of a refused order (err.status:
  // 401 a bad or expired token, 403, 409, 422, 425 too early, 429, 503 —
  // err.problem.type says which).
  async function order(opts) {
    const base = opts.base || '';
    const h = Object.assign({}, opts.headers, { 'Authorization': 'Bearer ' + opts.token, 'Content-Type': 'application/json' });
    const r = await call('POST', base + '/v1/orders', h, JSON.stringify({ sku: opts.sku, quantity: opts.quantity || 1 }));
    if (!r.ok) throw problem(r);
    let o = r.data;
    while (o.status === 'PENDING') {
      await sleep(500);
      const p = await call('GET', base + '/v1/orders/' + encodeURIComponent(o.orderId), opts.headers || {});
      if (p.ok) o = p.data;
      else if (p.status !== 429 && p.status !== 503) throw problem(p);
    }
    return o;
  }

  root.Usher = { wait, order };
})(typeof self !== 'undefined' ? self : this);
