// The operator's dashboard (GET /ui): polls the admin endpoints of `txo serve` and draws what
// they say. Hand-written, no libraries, no build step.
//
// The admin token: a browser cannot send an Authorization header when it navigates to a page,
// so /ui itself is served without one and this script sends `Authorization: Bearer <token>`
// with every API call. The token is kept in sessionStorage (it goes away with the tab). It can
// be given once in the URL fragment, /ui#token=..., which never reaches the server or its
// logs; the script stores it and removes it from the address bar.
//
// Everything that comes from the database (event types, errors, owner names) goes into the
// page with textContent, never as HTML.
'use strict';

const POLL_MS = 3000;
const HISTORY_POINTS = 200; // 10 minutes at one sample every 3 s
const TOKEN_KEY = 'txo.adminToken';
const DLQ_LIMIT = 100; // dead letters listed, oldest first (the total is in the outbox card)
// Parked aggregates are read every PARKED_EVERY polls: the query reads every due row.
const PARKED_EVERY = 5;
const PARKED_LIMIT = 50;
let polls = 0;

const history = []; // {t, pending, age}
let statusHoldUntil = 0; // the outcome of an action stays on screen for a while

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

function takeTokenFromFragment() {
  const m = /^#token=(.+)$/.exec(window.location.hash);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    window.history.replaceState(null, '', window.location.pathname + window.location.search);
  }
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(method, path) {
  const headers = {Accept: 'application/json'};
  if (token() !== '') headers.Authorization = 'Bearer ' + token();
  const resp = await fetch(path, {method, headers, cache: 'no-store'});
  let body = null;
  try {
    body = await resp.json();
  } catch (e) {
    body = null;
  }
  if (!resp.ok) {
    const msg = body && body.message ? body.message : resp.statusText;
    throw new ApiError(resp.status, method + ' ' + path + ': ' + resp.status + ' ' + msg);
  }
  return body;
}

// ---- small DOM helpers: text only ----

function el(tag, opts, ...children) {
  const e = document.createElement(tag);
  if (opts) {
    if (opts.cls) e.className = opts.cls;
    if (opts.title) e.title = opts.title;
    if (opts.data) for (const [k, v] of Object.entries(opts.data)) e.dataset[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function setText(id, value) {
  document.getElementById(id).textContent = String(value);
}

function fillBody(tableId, rows, emptyText, columns) {
  const tbody = document.querySelector('#' + tableId + ' tbody');
  tbody.replaceChildren(...rows);
  if (rows.length === 0) {
    tbody.append(el('tr', {cls: 'empty'}, el('td', null, emptyText)));
    tbody.lastChild.firstChild.colSpan = columns;
  }
}

function duration(seconds) {
  const s = Math.max(0, Math.round(Number(seconds) || 0));
  if (s < 120) return s + ' s';
  if (s < 7200) return Math.round(s / 60) + ' min';
  if (s < 172800) return (s / 3600).toFixed(1) + ' h';
  return (s / 86400).toFixed(1) + ' d';
}

function when(rfc3339) {
  if (!rfc3339) return '';
  return rfc3339.replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function setStatus(text, bad, holdMs) {
  if (holdMs) statusHoldUntil = Date.now() + holdMs;
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = bad ? 'bad' : '';
}

// A button that acts on the second click within 4 s, so one stray click changes nothing.
function confirmButton(label, data, action) {
  const b = el('button', {cls: 'action', data}, label);
  let armed = null;
  b.addEventListener('click', async () => {
    if (armed === null) {
      b.textContent = 'Confirm ' + label.toLowerCase();
      b.classList.add('armed');
      armed = setTimeout(() => {
        armed = null;
        b.textContent = label;
        b.classList.remove('armed');
      }, 4000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    b.disabled = true;
    b.textContent = label + '...';
    try {
      const r = await action();
      setStatus(label + ' done: ' + JSON.stringify(r), false, 8000);
    } catch (e) {
      setStatus(e.message, true, 8000);
    }
    await refresh();
  });
  return b;
}

// ---- the sections ----

function drawChart() {
  const canvas = document.getElementById('backlog-chart');
  const ctx = canvas.getContext('2d');
  const w = canvas.width;
  const h = canvas.height;
  const pad = {l: 56, r: 56, t: 12, b: 24};
  ctx.clearRect(0, 0, w, h);
  ctx.font = '12px system-ui, sans-serif';
  ctx.fillStyle = '#667';
  ctx.strokeStyle = '#dde';
  ctx.lineWidth = 1;
  const maxPending = Math.max(1, ...history.map((p) => p.pending));
  const maxAge = Math.max(1, ...history.map((p) => p.age));
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + ((h - pad.t - pad.b) * i) / 4;
    ctx.beginPath();
    ctx.moveTo(pad.l, y);
    ctx.lineTo(w - pad.r, y);
    ctx.stroke();
    ctx.textAlign = 'right';
    ctx.fillText(String(Math.round((maxPending * (4 - i)) / 4)), pad.l - 6, y + 4);
    ctx.textAlign = 'left';
    ctx.fillText(String(Math.round((maxAge * (4 - i)) / 4)) + ' s', w - pad.r + 6, y + 4);
  }
  if (history.length < 2) return;
  const t0 = history[0].t;
  const span = Math.max(1, history[history.length - 1].t - t0);
  const x = (t) => pad.l + ((w - pad.l - pad.r) * (t - t0)) / span;
  const y = (v, max) => h - pad.b - ((h - pad.t - pad.b) * v) / max;
  const line = (key, max, color) => {
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    history.forEach((p, i) => {
      if (i === 0) ctx.moveTo(x(p.t), y(p[key], max));
      else ctx.lineTo(x(p.t), y(p[key], max));
    });
    ctx.stroke();
  };
  line('pending', maxPending, '#2b6cb0');
  line('age', maxAge, '#dd6b20');
  ctx.fillStyle = '#667';
  ctx.textAlign = 'left';
  ctx.fillText(new Date(t0).toLocaleTimeString(), pad.l, h - 6);
  ctx.textAlign = 'right';
  ctx.fillText(new Date(history[history.length - 1].t).toLocaleTimeString(), w - pad.r, h - 6);
  setText('chart-span', '(last ' + duration(span / 1000) + ')');
}

function showOutbox(st) {
  setText('pending', st.pending);
  setText('processing', st.processing);
  setText('oldest', duration(st.oldest_pending_age_seconds));
  setText('failed', st.failed);
  setText('dead', st.dead_letters);
  setText('published', st.published);
  document.getElementById('failed').classList.toggle('bad', st.failed > 0);
  document.getElementById('dead').classList.toggle('bad', st.dead_letters > 0);
  history.push({t: Date.now(), pending: st.pending + st.processing,
                age: st.oldest_pending_age_seconds});
  while (history.length > HISTORY_POINTS) history.shift();
  drawChart();
}

function showDeadLetters(d) {
  const rows = d.dead_letters.map((dl) => el('tr', {data: {deadLetter: dl.id}},
      el('td', null, dl.id),
      el('td', null, dl.source_event_id),
      el('td', null, dl.event_type),
      el('td', {cls: 'error', title: dl.error}, dl.error),
      el('td', null, when(dl.created_at)),
      el('td', null, dl.replay_count),
      el('td', null, confirmButton('Replay', {replay: dl.id},
          () => api('POST', '/dlq/' + encodeURIComponent(dl.id) + '/replay')))));
  fillBody('dlq', rows, 'No dead letters.', 7);
  setText('dlq-count', rows.length >= DLQ_LIMIT ? '(the oldest ' + DLQ_LIMIT + ')' : '');
}

// A running saga past a deadline (a worker hung in a step): which, where, for how long.
function deadlineText(d) {
  if (!d) return '';
  return 'past its ' + d.kind + ' deadline ' + duration(d.overdue_seconds) + ' ago' +
         (d.step ? ' at ' + d.step : '');
}

function showSagas(s) {
  const rows = Object.entries(s.by_status).map(([status, n]) =>
    el('tr', {cls: n > 0 && /FAILED|COMPENSATING/.test(status) ? 'warn' : '',
              data: {status}},
       el('th', null, status), el('td', {cls: 'count'}, n)));
  rows.push(el('tr', {cls: s.abandoned > 0 ? 'bad' : ''},
               el('th', null, 'given up (COMPENSATION_FAILED, no retry due)'),
               el('td', {cls: 'count'}, s.abandoned)));
  fillBody('saga-counts', rows, '', 2);
  setText('stuck-idle', s.stuck_idle_seconds);
  const attention = s.sagas.map((g) => {
    const step = g.failing_step;
    const tries = g.status === 'COMPENSATION_FAILED' ?
      g.compensation_tries + (g.retry_scheduled ? ' (retry scheduled)' : ' (given up)') : '';
    return el('tr', {data: {saga: g.saga_id, status: g.status}},
        el('td', {cls: 'mono'}, g.saga_id),
        el('td', null, g.saga_type),
        el('td', {cls: g.status === 'COMPENSATION_FAILED' ? 'bad' : 'warn'}, g.status),
        el('td', null, deadlineText(g.deadline) ||
           (step ? step.step + '. ' + step.name + ' (' + step.status + ')' : '')),
        el('td', {cls: 'error', title: step && step.error ? step.error : ''},
           step && step.error ? step.error : ''),
        el('td', null, duration(g.idle_seconds)),
        el('td', null, tries),
        el('td', null, g.status === 'COMPENSATION_FAILED' ?
           confirmButton('Retry', {retry: g.saga_id},
               () => api('POST', '/sagas/' + encodeURIComponent(g.saga_id) + '/retry')) : ''));
  });
  fillBody('attention', attention, 'Nothing stuck, nothing failed.', 8);
}

function showProcesses(p) {
  const procs = p.processes;
  const rows = procs.map((q) => el('tr', {cls: q.alive ? '' : 'stale',
                                          data: {owner: q.owner, alive: q.alive}},
      el('td', {cls: 'mono'}, q.owner),
      el('td', null, q.role),
      el('td', null, q.version),
      el('td', null, when(q.started_at)),
      el('td', null, duration(q.heartbeat_age_seconds) + ' ago'),
      el('td', {cls: q.alive ? 'ok' : 'bad'}, q.alive ? 'alive' : 'stale')));
  fillBody('processes', rows, p.available ? 'No process has registered.' :
           'txo_processes is missing: run `txo migrate`.', 6);
  const breakers = [];
  for (const q of procs) {
    const b = q.status && q.status.breakers ? q.status.breakers : {};
    for (const [name, state] of Object.entries(b)) {
      breakers.push(el('tr', {cls: q.alive ? '' : 'stale', data: {breaker: name}},
          el('td', {cls: 'mono'}, q.owner),
          el('td', null, name),
          el('td', {cls: state === 'closed' ? 'ok' : 'bad'}, state + (q.alive ? '' : ' (stale)'))));
    }
  }
  fillBody('breakers', breakers, 'No breakers reported.', 3);
}

function showParked(p) {
  const rows = p.parked.map((a) => el('tr', {data: {parked: a.event_id}},
      el('td', {cls: 'mono'}, a.aggregate_type + '/' + (a.aggregate_id === null ? '?' : a.aggregate_id)),
      el('td', null, a.event_id),
      el('td', {cls: a.status === 'FAILED' ? 'bad' : 'warn'}, a.status),
      el('td', null, a.attempts),
      el('td', {cls: 'error', title: a.last_error || ''}, a.last_error || ''),
      el('td', {cls: 'count'}, a.waiting)));
  fillBody('parked', rows, 'No aggregate is held back.', 6);
  setText('parked-count', rows.length >= PARKED_LIMIT ? '(the oldest ' + PARKED_LIMIT + ')' : '');
}

async function refresh() {
  try {
    const [stats, dlq, sagas, procs] = await Promise.all([
      api('GET', '/outbox/stats'), api('GET', '/dlq?limit=' + DLQ_LIMIT), api('GET', '/sagas'),
      api('GET', '/processes')]);
    showOutbox(stats);
    showDeadLetters(dlq);
    showSagas(sagas);
    showProcesses(procs);
    if (polls++ % PARKED_EVERY === 0)
      showParked(await api('GET', '/outbox/parked?limit=' + PARKED_LIMIT));
    document.body.dataset.loaded = 'true';
    if (Date.now() > statusHoldUntil)
      setStatus('updated ' + new Date().toLocaleTimeString(), false);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      setStatus('The admin endpoints need the token: enter it above.', true);
      document.getElementById('token').focus();
    } else {
      setStatus(e.message, true);
    }
  }
}

function start() {
  takeTokenFromFragment();
  document.getElementById('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = document.getElementById('token');
    sessionStorage.setItem(TOKEN_KEY, input.value);
    input.value = '';
    refresh();
  });
  document.getElementById('token-forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    refresh();
  });
  refresh();
  setInterval(refresh, POLL_MS);
}

document.addEventListener('DOMContentLoaded', start);
