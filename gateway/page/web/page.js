// usher's waiting room: joins the line (or resumes with the ticket kept in
// localStorage), listens for its turn on the notifier's event stream, falls
// back to polling when the stream is unavailable, and on READY offers the
// order button. No dependencies, no build step. Every text it writes comes
// from the page's message catalog, which the gateway puts in the page as
// JSON (#usher-i18n) in the language it chose; numbers, dates and times are
// written by Intl in that language.
//
// The same page works without JavaScript (its forms post to the gateway,
// which answers with the page in the state it read); this script takes it
// over: the forms' buttons become its own, and the <noscript> parts never
// show.
(() => {
  'use strict';
  const root = document.getElementById('usher');
  const $ = (id) => document.getElementById(id);
  const i18n = JSON.parse($('usher-i18n').textContent);
  const lang = i18n.lang || document.documentElement.lang || 'en';
  // t is the catalog's text for key with each {name} of vars filled in.
  function t(key, vars) {
    const s = i18n.messages[key];
    if (s == null) return key;
    return vars ? s.replace(/\{([A-Za-z]+)\}/g, (m, name) => (name in vars ? String(vars[name]) : m)) : s;
  }
  const has = (key) => i18n.messages[key] != null;
  const numbers = new Intl.NumberFormat(lang);
  const num = (n) => numbers.format(n);
  // problemText is what a shopper reads for an error answer (an RFC 9457
  // problem, or none).
  function problemText(r) {
    const type = (r.data && r.data.type) || '';
    const key = i18n.problems[type.slice(type.lastIndexOf('/') + 1)];
    if (key) return t(key);
    return r.status ? t('error.status', { status: r.status }) : t('error.generic');
  }
  const queue = root.dataset.queue;
  const params = new URLSearchParams(location.search);
  // The SKU an order names: ?sku=, else the page's (data-sku), else the
  // queue's name. A queue that sells variants (skus) has the shopper
  // choose one in #variant instead, which the gateway preselected from
  // ?sku= when it is one of them.
  const sku = params.get('sku') || root.dataset.sku || queue;
  const variant = $('variant');
  const base = '/v1/queues/' + encodeURIComponent(queue) + '/tickets';

  // In production the shop's auth proxy, in front of the gateway, sets
  // X-User-Id from the shopper's session and this value is overwritten.
  // Standing alone, the page takes the id from ?user= or makes a random one
  // and keeps it in localStorage, so a reload keeps the same place.
  function userId() {
    const given = params.get('user');
    if (given) return given;
    let id = localStorage.getItem('usher.user');
    if (!id) {
      const b = new Uint8Array(12);
      crypto.getRandomValues(b);
      id = 'web-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
      localStorage.setItem('usher.user', id);
    }
    return id;
  }
  const user = userId();
  const key = 'usher.ticket.' + queue + '.' + user;

  let ticket = null;
  let eventsURL = null;
  let pollAfter = 2000;
  let es = null;
  let pollTimer = null;
  let sseRetry = null;
  let countdown = null;
  let token = null;
  let done = false;

  function setConn(state, text) {
    root.dataset.conn = state;
    $('conn').textContent = text;
  }

  function show(section) {
    for (const id of ['solving', 'prequeue', 'waiting', 'ready', 'ended']) $(id).hidden = id !== section;
  }

  function fail(msg) {
    $('error').textContent = msg;
    $('error').hidden = !msg;
  }

  function duration(s) {
    if (s == null) return '–';
    if (s < 60) return t('duration.seconds', { s });
    const m = Math.floor(s / 60);
    if (m < 60) return t('duration.minutes', { m, ss: String(s % 60).padStart(2, '0') });
    return t('duration.hours', { h: Math.floor(m / 60), mm: String(m % 60).padStart(2, '0') });
  }

  function showPosition(p) {
    if (root.dataset.status === 'PRE_QUEUE') clearInterval(countdown);
    root.dataset.status = 'WAITING';
    show('waiting');
    const pos = p.position || 0;
    $('position').textContent = pos ? num(pos) : '–';
    $('ahead').textContent = pos ? num(Math.max(pos - 1, 0)) : '–';
    $('eta').textContent = p.etaSeconds == null ? t('waiting.etaUnknown') : duration(p.etaSeconds);
    // Progress runs from the place first shown to the head of the line.
    let first = Number(localStorage.getItem(key + '.first')) || 0;
    if (pos > first) {
      first = pos;
      localStorage.setItem(key + '.first', String(pos));
    }
    const frac = first > 1 ? (first - pos) / (first - 1) : pos === 1 ? 1 : 0;
    const pct = Math.round(Math.min(Math.max(frac, 0), 1) * 100);
    $('fill').style.transform = 'scaleX(' + pct / 100 + ')';
    $('bar').setAttribute('aria-valuenow', String(pct));
  }

  // showStock says whether units are left for the shopper: held means the
  // last ones are with shoppers ahead and may come back.
  function showStock(st, skus) {
    const el = $('stock');
    const texts = {
      available: skus && skus.length > 1 ? t('stock.available', { skus: skus.join(', ') }) : '',
      held: t('stock.held'),
      sold_out: t('stock.soldOut'),
    };
    el.textContent = texts[st] || '';
    el.hidden = !el.textContent;
  }

  // showNotice shows what the operators tell the line: n is a poll
  // answer's notice (absent: none) or the stream's notice event ({} when
  // taken down). The banner lives in one of two live regions the page
  // always has, a status for info and an alert for a warning; a region is
  // written only when its text changes, so a screen reader reads each
  // notice once. The message is text, never markup.
  function showNotice(n) {
    const msg = n && typeof n.message === 'string' ? n.message : '';
    const level = n && n.level === 'warning' ? 'warning' : 'info';
    for (const l of ['info', 'warning']) {
      const region = $('notice-' + l);
      const want = l === level ? msg : '';
      const shown = region.querySelector('.notice-text');
      if ((shown ? shown.textContent : region.textContent) === want) continue;
      if (!want) {
        region.replaceChildren();
        continue;
      }
      const label = document.createElement('strong');
      label.className = 'notice-label';
      label.textContent = t('notice.' + l);
      const text = document.createElement('span');
      text.className = 'notice-text';
      text.textContent = want;
      region.replaceChildren(label, ' ', text);
    }
  }

  // showPreQueue counts down to a scheduled drop's opening; the draw then
  // gives the place (the stream's position event, or the next poll).
  function showPreQueue(p) {
    root.dataset.status = 'PRE_QUEUE';
    show('prequeue');
    const opens = Date.parse(p.opensAt);
    const at = $('opens-at');
    at.dateTime = p.opensAt;
    at.textContent = new Date(opens).toLocaleString(lang, { weekday: 'short', hour: '2-digit', minute: '2-digit', second: '2-digit' });
    const tick = () => {
      const left = Math.max(0, Math.round((opens - Date.now()) / 1000));
      $('opens-in').textContent = left > 0 ? duration(left) : t('prequeue.drawing');
      if (left === 0) clearInterval(countdown);
    };
    clearInterval(countdown);
    tick();
    countdown = setInterval(tick, 1000);
  }

  // showLeft shows what a READY shopper can still order, from a READY
  // answer or event r: on a stock-aware queue (r.stock said) a variant
  // not in r.skusAvailable ran out, and is shown sold out and cannot be
  // chosen; with nothing left the form gives way to #sold-out, a status
  // that says so. Once an order is on its way (the button disabled) the
  // form stays as the shopper sent it. Returns whether anything is left.
  function showLeft(r) {
    const form = $('order-form');
    const button = $('order');
    if (!form || button.disabled) return true;
    const known = typeof r.stock === 'string' && r.stock !== '';
    const left = new Set(Array.isArray(r.skusAvailable) ? r.skusAvailable : []);
    let any = !known || left.has(sku);
    if (variant) {
      any = false;
      for (const o of variant.options) {
        if (!o.value) continue;
        const out = known && !left.has(o.value);
        if (out && o.selected) variant.value = '';
        o.disabled = out;
        const text = out ? t('ready.variantSoldOut', { sku: o.value }) : o.value;
        if (o.textContent !== text) o.textContent = text;
        if (!out) any = true;
      }
    }
    const focused = form.contains(document.activeElement);
    form.hidden = !any;
    const status = $('sold-out');
    const text = any ? '' : t('ready.soldOut');
    if (status.textContent !== text) status.textContent = text;
    // The focus was in the form it hid: to the heading, before the status
    // that says why.
    if (focused && !any) focusHeading();
    return any;
  }

  // focusHeading moves the focus to READY's heading (when there is no
  // order to place).
  function focusHeading() {
    const title = $('ready-title');
    title.tabIndex = -1;
    title.focus();
  }

  function showReady(r) {
    const first = root.dataset.status !== 'READY';
    root.dataset.status = 'READY';
    token = r.token;
    // Sent here by the shop's proxy gate (?return=): the turn has come, so
    // the gateway hands out the pass and sends the shopper back to the
    // shop (a form's POST: the ticket stays out of every URL).
    const ret = params.get('return');
    if (first && ret) {
      const f = document.createElement('form');
      f.method = 'post';
      f.action = '/v1/gate/pass';
      for (const [name, value] of [['ticket', ticket], ['return', ret]]) {
        const field = document.createElement('input');
        field.type = 'hidden';
        field.name = name;
        field.value = value;
        f.appendChild(field);
      }
      document.body.appendChild(f);
      f.submit();
    }
    show('ready');
    const anyLeft = showLeft(r);
    // The turn has come: the order button takes the focus, so a keyboard
    // or screen-reader user lands on it (its description is the heading).
    // A queue that sells nothing through usher has no order button, and
    // one with nothing left no form: the heading takes the focus instead,
    // and the text after it says where to buy, or that it sold out. On a
    // queue that sells variants, the choice takes it until a variant is
    // chosen.
    const button = $('order');
    if (first && (!button || !anyLeft)) focusHeading();
    else if (first && variant && !variant.value) variant.focus();
    else if (first && !button.disabled) button.focus();
    const expires = Date.parse(r.expiresAt);
    const tick = () => {
      const left = Math.max(0, Math.round((expires - Date.now()) / 1000));
      $('left').textContent = duration(left);
      if (left === 0) clearInterval(countdown);
    };
    clearInterval(countdown);
    tick();
    countdown = setInterval(tick, 1000);
  }

  function end(status, reason) {
    done = true;
    root.dataset.status = status;
    stopStream();
    stopPolling();
    clearInterval(countdown);
    const closed = reason === 'sold_out' || reason === 'ended' ? reason : 'other';
    const texts = {
      EXPIRED: [t('ended.EXPIRED.title'), t('ended.EXPIRED.text')],
      USED: [t('ended.USED.title'), t('ended.USED.text')],
      LEFT: [t('ended.LEFT.title'), t(reason === 'abandoned' ? 'ended.LEFT.abandoned' : 'ended.LEFT.text')],
      CLOSED: [t('ended.CLOSED.title'), t('ended.CLOSED.' + closed)],
      MAINTENANCE: [t('ended.MAINTENANCE.title'), t('ended.MAINTENANCE.text')],
    };
    const [title, text] = texts[status] || ['', ''];
    $('end-title').textContent = title;
    $('end-text').textContent = text;
    $('rejoin').textContent = t('ended.rejoin');
    $('rejoin').hidden = status === 'CLOSED' || status === 'USED' || status === 'MAINTENANCE';
    show('ended');
    setConn('ended', t('conn.finished'));
  }

  // apply takes a join or poll answer.
  function apply(p) {
    ticket = p.ticket;
    eventsURL = p.events;
    if (p.pollAfterMs) pollAfter = p.pollAfterMs;
    localStorage.setItem(key, ticket);
    showNotice(p.notice);
    switch (p.status) {
      case 'PRE_QUEUE': showPreQueue(p); break;
      case 'WAITING': showPosition(p); showStock(p.stock, p.skusAvailable); break;
      case 'READY': showReady(p); break;
      default: end(p.status, p.reason);
    }
  }

  async function call(method, url, headers, body) {
    const res = await fetch(url, { method, headers, body, cache: 'no-store' });
    let data = null;
    try { data = await res.json(); } catch { /* empty or not JSON */ }
    return { status: res.status, ok: res.ok, data, headers: res.headers };
  }

  // challenge asks for a proof-of-work challenge; null when the gateway
  // has none to give (the join then goes without a proof).
  async function challenge() {
    try {
      const r = await call('GET', '/v1/queues/' + encodeURIComponent(queue) + '/challenge');
      return r.ok && r.data && r.data.challenge ? r.data : null;
    } catch (e) {
      return null;
    }
  }

  // prove solves a challenge in a Web Worker (pow.js), showing progress,
  // and returns the Usher-PoW header value.
  async function prove(ch) {
    if (!ch.difficulty) return window.UsherPoW.header(ch.challenge, '0');
    root.dataset.status = 'SOLVING';
    show('solving');
    const paint = (frac) => {
      const pct = Math.round(Math.min(Math.max(frac, 0), 1) * 100);
      $('work-fill').style.transform = 'scaleX(' + pct / 100 + ')';
      $('work').setAttribute('aria-valuenow', String(pct));
    };
    paint(0);
    const nonce = await window.UsherPoW.solve(ch.challenge, ch.difficulty, {
      worker: '/q/static/pow.js',
      onProgress: paint,
    });
    return window.UsherPoW.header(ch.challenge, nonce);
  }

  // join solves the queue's challenge first (a queue without one asks
  // difficulty 0: no work), and once more with the fresh challenge of a
  // 428 (it expired, or the queue asks for more work now).
  async function join() {
    let ch = window.UsherPoW ? await challenge() : null;
    let r;
    for (let attempt = 0; ; attempt++) {
      const headers = { 'X-User-Id': user };
      if (ch) headers['Usher-PoW'] = await prove(ch);
      r = await call('POST', base, headers);
      if (r.status !== 428 || attempt >= 2 || !(r.data && r.data.challenge)) break;
      ch = r.data.challenge;
    }
    if (!r.ok) {
      if (r.status === 410) return end('CLOSED', r.data && r.data.reason);
      if (r.status === 503 && r.data && /maintenance$/.test(r.data.type || '')) {
        end('MAINTENANCE');
        const after = Number(r.headers.get('Retry-After')) || 60;
        setTimeout(() => { done = false; setConn('connecting', t('conn.connecting')); start(); }, after * 1000);
        return;
      }
      throw new Error(problemText(r));
    }
    apply(r.data);
  }

  async function poll() {
    const r = await call('GET', base + '/' + encodeURIComponent(ticket));
    // A ticket of a line since reset (410 ticket-stale) is dropped like one
    // the line does not know, and the shopper joins again (as without
    // JavaScript): kept, it was polled every few seconds for good.
    const stale = r.status === 410 && /ticket-stale$/.test((r.data && r.data.type) || '');
    if (r.status === 401 || r.status === 404 || stale) {
      localStorage.removeItem(key);
      return join();
    }
    if (!r.ok) throw new Error(problemText(r));
    apply(r.data);
  }

  function stopPolling() {
    clearTimeout(pollTimer);
    pollTimer = null;
  }

  // Polling is the fallback while the stream is down; the stream, once back,
  // stops it.
  function startPolling() {
    if (pollTimer || done) return;
    const loop = async () => {
      try {
        await poll();
        fail('');
      } catch (e) {
        fail(t('error.connection'));
      }
      if (!done && root.dataset.conn !== 'live') pollTimer = setTimeout(loop, pollAfter);
      else pollTimer = null;
    };
    pollTimer = setTimeout(loop, pollAfter);
  }

  function stopStream() {
    clearTimeout(sseRetry);
    if (es) es.close();
    es = null;
  }

  function listen() {
    if (done || !eventsURL || !window.EventSource) {
      if (!done) { setConn('polling', t('conn.polling')); startPolling(); }
      return;
    }
    stopStream();
    es = new EventSource(eventsURL);
    es.onopen = () => {
      setConn('live', t('conn.live'));
      stopPolling();
      fail('');
    };
    es.onerror = () => {
      if (done) return;
      if (es && es.readyState === EventSource.CLOSED) {
        // The browser gave up on this stream: poll, and try the stream
        // again later.
        setConn('polling', t('conn.polling'));
        sseRetry = setTimeout(listen, 15000);
      } else {
        setConn('reconnecting', t('conn.reconnecting'));
      }
      startPolling();
    };
    const data = (e) => JSON.parse(e.data);
    es.addEventListener('prequeue', (e) => showPreQueue(data(e)));
    es.addEventListener('position', (e) => showPosition(data(e)));
    es.addEventListener('stock', (e) => { const d = data(e); showStock(d.stock, d.skusAvailable); });
    es.addEventListener('notice', (e) => showNotice(data(e)));
    // After READY the stream stays open for the operators' notices (it says
    // nothing else until the token's end); its end leaves the page as it
    // is, which the countdown and the order's answer keep up to date.
    es.addEventListener('ready', (e) => {
      showReady(data(e));
      stopPolling();
      setConn('live', t('conn.yourTurn'));
    });
    es.addEventListener('expired', () => {
      if (root.dataset.status === 'READY') stopStream(); else end('EXPIRED');
    });
    es.addEventListener('closed', (e) => {
      if (root.dataset.status === 'READY') return stopStream();
      const d = data(e);
      end(d.reason === 'used' ? 'USED' : d.reason === 'left' ? 'LEFT' : 'CLOSED', d.abandoned ? 'abandoned' : d.reason);
    });
  }

  // orderText is what the shopper reads of an order's answer.
  function orderText(d) {
    const status = has('order.status.' + d.status) ? t('order.status.' + d.status) : (d.status || '');
    if (!d.reason) return t('order.answer', { id: d.orderId || '', status });
    const reason = has('order.reason.' + d.reason) ? t('order.reason.' + d.reason) : d.reason;
    return t('order.answerReason', { id: d.orderId || '', status, reason });
  }

  async function order(e) {
    if (e) e.preventDefault(); // the form posts only without JavaScript
    const button = $('order');
    const answer = $('answer');
    if (button.disabled) return;
    if (variant && !variant.value) { // the form's required choice, had it been skipped
      answer.className = 'answer bad';
      answer.textContent = t('ready.variantChoose');
      variant.focus();
      return;
    }
    button.disabled = true;
    if (variant) variant.disabled = true;
    answer.className = 'answer';
    answer.textContent = t('order.placing');
    try {
      const r = await call('POST', '/v1/orders', {
        'Authorization': 'Bearer ' + token,
        'Content-Type': 'application/json',
        'X-User-Id': user,
      }, JSON.stringify({ sku: variant ? variant.value : sku, quantity: 1 }));
      const d = r.data || {};
      if (r.ok) {
        answer.className = 'answer ok';
        answer.textContent = orderText(d);
      } else {
        answer.className = 'answer bad';
        answer.textContent = problemText(r);
        button.disabled = false;
        if (variant) variant.disabled = false;
      }
    } catch (err) {
      answer.className = 'answer bad';
      answer.textContent = t('order.sendFailed');
      button.disabled = false;
      if (variant) variant.disabled = false;
    }
  }

  async function start() {
    try {
      ticket = localStorage.getItem(key);
      if (ticket) await poll(); else await join();
      listen();
    } catch (e) {
      fail(t('error.retrying', { error: e instanceof TypeError ? t('error.network') : e.message }));
      setTimeout(start, 3000);
    }
  }

  if ($('order-form')) $('order-form').addEventListener('submit', order);
  $('rejoin-form').addEventListener('submit', (e) => {
    e.preventDefault();
    localStorage.removeItem(key);
    localStorage.removeItem(key + '.first');
    done = false;
    setConn('connecting', t('conn.connecting'));
    start();
  });
  start();
})();
