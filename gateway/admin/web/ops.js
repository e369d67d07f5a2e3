// usher's ops dashboard. The page holds no data: it asks for the admin
// token once (sessionStorage, gone with the tab), then reads
// GET /v1/admin/ops/stream with fetch() — an EventSource cannot send an
// Authorization header — parsing the Server-Sent Events framing itself.
// If streaming fails it polls GET /v1/admin/ops every second and tries to
// stream again now and then. Charts keep the last minutes in memory only.
(function () {
  'use strict';
  var root = document.getElementById('ops');
  var KEY = 'usher-admin-token', WHO = 'usher-admin-user';
  var HISTORY_MS = 10 * 60 * 1000; // what the sparklines show
  var LIVE = ['waiting', 'active', 'admittedTotal', 'admitRatePerSec', 'stock', 'preQueue', 'lottery', 'adaptiveLimit', 'lastTickAt']; // not configuration
  var history = {};   // queue -> [{t, waiting, active, target, rate}]
  var cards = {};     // queue -> element
  var stopStream = null, pollTimer = null, retryTimer = null;

  function $(id) { return document.getElementById(id); }
  function token() { return sessionStorage.getItem(KEY) || ''; }
  function who() { return sessionStorage.getItem(WHO) || 'ops-dashboard'; }
  function headers(extra) {
    var h = { 'Authorization': 'Bearer ' + token() };
    for (var k in extra) { h[k] = extra[k]; }
    return h;
  }

  function setConn(state, text) {
    root.dataset.conn = state;
    $('conn').textContent = text;
    $('logout').hidden = state === 'login';
  }

  // --- sign in and out ---------------------------------------------------
  $('login').addEventListener('submit', function (e) {
    e.preventDefault();
    sessionStorage.setItem(KEY, $('token').value.trim());
    sessionStorage.setItem(WHO, $('who').value.trim() || 'ops-dashboard');
    $('token').value = '';
    $('loginError').textContent = '';
    start();
  });
  $('logout').addEventListener('click', function () { signOut(''); });

  function signOut(why) {
    sessionStorage.removeItem(KEY);
    stopAll();
    setConn('login', 'Signed out');
    $('loginError').textContent = why;
  }

  function stopAll() {
    if (stopStream) { stopStream(); stopStream = null; }
    clearInterval(pollTimer); pollTimer = null;
    clearTimeout(retryTimer); retryTimer = null;
  }

  function start() {
    stopAll();
    if (!token()) { setConn('login', 'Signed out'); return; }
    setConn('connecting', 'Connecting…');
    stream();
  }

  // --- the stream ----------------------------------------------------------
  function stream() {
    var ctrl = new AbortController();
    var stopped = false;
    stopStream = function () { stopped = true; ctrl.abort(); };
    fetch('/v1/admin/ops/stream', { headers: headers({ 'Accept': 'text/event-stream' }), signal: ctrl.signal, cache: 'no-store' })
      .then(function (res) {
        if (res.status === 401) { throw { unauthorized: true }; }
        if (!res.ok || !res.body) { throw new Error('status ' + res.status); }
        setConn('live', 'Live');
        var reader = res.body.getReader(), dec = new TextDecoder(), buf = '';
        function pump() {
          return reader.read().then(function (r) {
            if (r.done) { throw new Error('stream ended'); }
            buf += dec.decode(r.value, { stream: true }).replace(/\r\n?/g, '\n');
            var end;
            while ((end = buf.indexOf('\n\n')) >= 0) {
              dispatch(buf.slice(0, end));
              buf = buf.slice(end + 2);
            }
            return pump();
          });
        }
        return pump();
      })
      .catch(function (err) {
        if (stopped) { return; }
        if (err && err.unauthorized) { signOut('That token was refused.'); return; }
        fallBack();
      });
  }

  // dispatch handles one SSE block: id/event/data lines, comments ignored.
  function dispatch(block) {
    var event = 'message', data = [];
    block.split('\n').forEach(function (line) {
      if (line === '' || line[0] === ':') { return; }
      var i = line.indexOf(':');
      var field = i < 0 ? line : line.slice(0, i);
      var value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
      if (field === 'event') { event = value; } else if (field === 'data') { data.push(value); }
    });
    if (event === 'queues' && data.length) { render(JSON.parse(data.join('\n'))); }
    if (event === 'error') { $('at').textContent = 'live figures unavailable'; }
  }

  // --- polling fallback ----------------------------------------------------
  function fallBack() {
    stopStream = null;
    setConn('polling', 'Polling (stream unavailable)');
    poll();
    pollTimer = setInterval(poll, 1000);
    retryTimer = setTimeout(start, 15000); // try to stream again
  }

  function poll() {
    fetch('/v1/admin/ops', { headers: headers({}), cache: 'no-store' })
      .then(function (res) {
        if (res.status === 401) { signOut('That token was refused.'); return null; }
        return res.ok ? res.json() : null;
      })
      .then(function (snap) { if (snap) { render(snap); } })
      .catch(function () { /* the next poll tries again */ });
  }

  // --- rendering -----------------------------------------------------------
  function render(snap) {
    var t = Date.parse(snap.at) || Date.now();
    root.dataset.breaker = snap.breakerOpen ? 'open' : 'closed';
    $('breaker').textContent = snap.breakerOpen ? 'open — admission held' : 'closed';
    $('at').textContent = 'updated ' + new Date(t).toLocaleTimeString();
    $('empty').hidden = snap.queues.length > 0;
    var seen = {};
    snap.queues.forEach(function (q) {
      seen[q.name] = true;
      var h = history[q.name] || (history[q.name] = []);
      h.push({ t: t, waiting: q.waiting, active: q.active, target: limitOf(q), rate: q.admitRatePerSec });
      while (h.length && h[0].t < t - HISTORY_MS) { h.shift(); }
      draw(card(q.name), q, h);
    });
    Object.keys(cards).forEach(function (name) {
      if (!seen[name]) { cards[name].remove(); delete cards[name]; delete history[name]; }
    });
  }

  function card(name) {
    if (cards[name]) { return cards[name]; }
    var el = $('card').content.firstElementChild.cloneNode(true);
    el.id = 'q-' + name;
    el.dataset.queue = name;
    el.querySelector('.name').textContent = name;
    var form = el.querySelector('[data-form="notice"]');
    form.addEventListener('submit', function (e) {
      e.preventDefault();
      setNotice(name, { message: form.elements.message.value, level: form.elements.level.value }, form);
    });
    form.querySelector('[data-notice="remove"]').addEventListener('click', function () { setNotice(name, null, form); });
    el.querySelectorAll('[data-action]').forEach(function (b) {
      b.addEventListener('click', function () { setState(name, b.dataset.action, el); });
    });
    $('queues').appendChild(el);
    cards[name] = el;
    return el;
  }

  function field(el, name, text) { el.querySelector('[data-field="' + name + '"]').textContent = text; }

  function draw(el, q, h) {
    el.dataset.state = q.state;
    var badge = el.querySelector('.state');
    badge.textContent = q.state;
    badge.dataset.state = q.state;
    el.querySelector('.reason').textContent = q.closedReason || '';
    field(el, 'waiting', fmt(q.waiting));
    field(el, 'active', fmt(q.active) + ' / ' + fmt(limitOf(q)));
    field(el, 'limit', limitText(q));
    field(el, 'rate', q.admitRatePerSec.toFixed(1));
    field(el, 'eta', q.etaLastSeconds == null ? '—' : duration(q.etaLastSeconds));
    field(el, 'admitted', fmt(q.admittedTotal) + ' admitted in all');
    var o = q.orders || {}, parts = [];
    ['PAID', 'FAILED', 'REJECTED'].forEach(function (s) { if (o[s]) { parts.push(fmt(o[s]) + ' ' + s.toLowerCase()); } });
    field(el, 'orders', parts.length ? parts.join(' · ') : 'none yet');
    field(el, 'stock', stockText(q.stock));
    field(el, 'pow', powText(q));
    field(el, 'drop', dropText(q));
    field(el, 'tick', tickText(q));
    field(el, 'notice', q.notice ? 'up since ' + new Date(q.notice.since).toLocaleTimeString() + ' (' + q.notice.level + '): ' + q.notice.message : 'none');
    el.querySelectorAll('[data-action]').forEach(function (b) { b.disabled = b.dataset.action === q.state; });
    spark(el, 'waiting', h, [['v', 'waiting']]);
    spark(el, 'active', h, [['v', 'active'], ['t', 'target']]);
    spark(el, 'rate', h, [['v', 'rate']]);
  }

  // dropText is the queue's mode and schedule: a countdown to the opening
  // with the pre-queue's size and the lottery's commitment, then the draw.
  function dropText(q) {
    var parts = [];
    if (q.mode === 'passthrough') { parts.push('passthrough: everyone READY at once (a dry run)'); }
    if (q.mode === 'reject') { parts.push('maintenance: joins refused (503)'); }
    if (q.opensAt) {
      var left = (Date.parse(q.opensAt) - Date.now()) / 1000;
      if (left > 0) {
        parts.push('opens in ' + duration(left) + ' · ' + fmt(q.preQueue || 0) + ' in the pre-queue');
      } else if (q.lottery && q.lottery.drawn) {
        parts.push('opened; lottery drawn (' + fmt(q.lottery.entries || 0) + ' placed)');
      } else {
        parts.push('opened; drawing ' + fmt(q.preQueue || 0) + ' places…');
      }
      if (q.lottery && q.lottery.commitment) { parts.push('commitment ' + q.lottery.commitment.slice(0, 12) + '…'); }
    }
    if (q.closesAt) {
      var end = (Date.parse(q.closesAt) - Date.now()) / 1000;
      parts.push(end > 0 ? 'closes in ' + duration(end) : 'ended');
    }
    if (q.allow && q.allow.length) { parts.push(fmt(q.allow.length) + ' allowed past the line'); }
    return parts.length ? parts.join(' · ') : 'a plain queue';
  }

  // tickText says how long ago an admitter last ticked the queue: an old
  // tick means nobody is admitting.
  function tickText(q) {
    if (!q.lastTickAt) { return 'no tick yet'; }
    var ago = Math.max(0, (Date.now() - Date.parse(q.lastTickAt)) / 1000);
    return ago < 5 ? 'ticking' : 'no tick for ' + duration(ago) + ' — is an admitter running?';
  }

  // limitOf is the targetActive a queue's ticks use: the adaptive limit
  // when there is one.
  function limitOf(q) { return q.adaptiveLimit ? q.adaptiveLimit.limit : q.targetActive; }

  // limitText says how the admission limit is set: fixed, or adaptive
  // within its bounds with the reason and the latencies it judged.
  function limitText(q) {
    var a = q.adaptiveLimit;
    if (!a) { return fmt(q.targetActive) + ' (fixed targetActive)'; }
    var s = fmt(a.limit) + ' adaptive, ' + fmt(q.adaptive.min) + '–' + fmt(q.adaptive.max) + ' · ' + a.reason.replace(/_/g, ' ');
    if (a.baselineMs > 0) {
      s += ' · order latency ' + Math.round(a.latencyMs) + ' ms against ' + Math.round(a.baselineMs) + ' ms unloaded';
    }
    return s;
  }

  // powText is the queue's proof of work at the door: off, or the bits a
  // join costs now (auto: within its bounds), and whether it is enforced.
  function powText(q) {
    var ch = q.challenge || {};
    if (!ch.mode || ch.mode === 'off' || q.powDifficulty == null) { return 'off'; }
    var s = q.powDifficulty + ' bits';
    if (ch.difficulty === 'auto') { s += ' (auto, ' + ch.min + '–' + ch.max + ')'; }
    s += ch.mode === 'log' ? ' · log only: nothing refused' : ' · enforced';
    if (ch.suspects === 'shadow') { s += ' · shadow line for suspects'; }
    return s;
  }

  // stockText is a stock-aware queue's stock: its state, then each SKU's
  // available / held / pending / sold units (sold null: the database could
  // not be read, so unknown, never shown as 0).
  function stockText(st) {
    if (!st) { return '—'; }
    var skus = (st.skus || []).map(function (k) {
      return k.sku + ': ' + fmt(k.available) + ' available, ' + fmt(k.held) + ' held, ' +
        fmt(k.pending) + ' pending, ' + (k.sold == null ? 'sold unknown' : fmt(k.sold) + ' sold');
    });
    return st.state.replace('_', ' ') + ' (' + fmt(st.sellable) + ' for the next in line, ' +
      fmt(st.heldByAdmitted) + ' held by admitted shoppers)' + (skus.length ? ' · ' + skus.join(' · ') : '');
  }

  // spark draws lines of h's fields into the card's inline SVG, all on one
  // scale from 0 to their maximum, across the time it has (at most
  // HISTORY_MS), so a fresh dashboard already shows a line.
  function spark(el, chart, h, lines) {
    var svg = el.querySelector('[data-chart="' + chart + '"]');
    var W = 120, H = 28, now = h.length ? h[h.length - 1].t : 0, top = 1;
    var span = h.length ? Math.max(now - h[0].t, 1000) : HISTORY_MS;
    h.forEach(function (p) { lines.forEach(function (l) { top = Math.max(top, p[l[1]]); }); });
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    lines.forEach(function (l) {
      var pts = h.map(function (p) {
        var x = W - (now - p.t) / span * W;
        var y = H - 1 - (p[l[1]] / top) * (H - 2);
        return x.toFixed(1) + ',' + y.toFixed(1);
      });
      if (pts.length === 1) { pts.unshift('0,' + pts[0].split(',')[1]); }
      var pl = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
      pl.setAttribute('class', l[0]);
      pl.setAttribute('points', pts.join(' '));
      svg.appendChild(pl);
    });
  }

  function fmt(n) { return Number(n).toLocaleString('en-US'); }

  function duration(s) {
    if (s > 0 && s < 1) { return '< 1 s'; }
    s = Math.round(s);
    if (s < 60) { return s + ' s'; }
    if (s < 3600) { return Math.floor(s / 60) + ' min ' + (s % 60) + ' s'; }
    return Math.floor(s / 3600) + ' h ' + Math.floor(s % 3600 / 60) + ' min';
  }

  // setNotice puts up (or, with null, takes down) the queue's notice.
  function setNotice(name, notice, form) {
    $('actionError').textContent = '';
    fetch('/v1/admin/queues/' + encodeURIComponent(name) + '/notice', {
      method: notice ? 'PUT' : 'DELETE', body: notice ? JSON.stringify(notice) : undefined,
      headers: headers({ 'Content-Type': 'application/json', 'X-Admin-User': who() })
    })
      .then(function (res) {
        if (!res.ok) { return res.json().then(function (p) { throw p; }); }
        if (notice) { form.elements.message.value = ''; }
      })
      .catch(function (p) {
        var why = (p && (p['invalid-params'] || p.invalidParams || []).map(function (x) { return x.name + ' ' + x.reason; }).join(', ')) || '';
        $('actionError').textContent = name + ': ' + ((p && (p.detail || p.title)) || 'the notice failed') + (why ? ' (' + why + ')' : '');
      });
  }

  // --- controls: read the configuration, change its state, put it back -----
  function setState(name, state, el) {
    if (state === 'closed' && !window.confirm('Close ' + name + '? New joins get 410 and everyone waiting is told CLOSED.')) { return; }
    $('actionError').textContent = '';
    el.querySelectorAll('[data-action]').forEach(function (b) { b.disabled = true; });
    var url = '/v1/admin/queues/' + encodeURIComponent(name);
    fetch(url, { headers: headers({}), cache: 'no-store' })
      .then(function (res) { return res.ok ? res.json() : res.json().then(function (p) { throw p; }); })
      .then(function (cfg) {
        LIVE.forEach(function (k) { delete cfg[k]; });
        cfg.state = state;
        if (state !== 'closed') { delete cfg.closedReason; }
        return fetch(url, {
          method: 'PUT', body: JSON.stringify(cfg),
          headers: headers({ 'Content-Type': 'application/json', 'X-Admin-User': who() })
        });
      })
      .then(function (res) { if (!res.ok) { return res.json().then(function (p) { throw p; }); } })
      .catch(function (p) {
        $('actionError').textContent = (name + ': ' + ((p && (p.detail || p.title)) || 'the change failed'));
      });
  }

  start();
}());
