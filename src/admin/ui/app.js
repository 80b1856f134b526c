// The operator's dashboard (GET /ui): polls the admin endpoints of `txo serve` and draws what
// they say. Hand-written, no libraries, no build step. This file has the API calls, the DOM
// helpers, the overview and the routing by the address's fragment: #/ the overview,
// #/saga/ID a saga's page, #/search/TEXT what the search box found, #/record/KIND/TEXT one of
// the service's records (pages.js draws those pages, chart.js the outbox charts).
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
const DLQ_LIMIT = 100; // dead events listed, oldest first (the total is in the outbox card)
// Parked aggregates are read every PARKED_EVERY polls: the query reads every due row.
const PARKED_EVERY = 5;
const PARKED_LIMIT = 50;
let polls = 0;

const history = []; // {t, pending, waiting, age, due}
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
    if (opts.href) e.href = opts.href;
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
    if (!document.getElementById('page').hidden) route(); // a page shows it too
  });
  return b;
}

// ---- the sections ----

// Which of the two it is: one event (or a few) in backoff, or a relay that publishes nothing.
const STALLED_DUE_S = 60;

function showOutbox(st) {
  setText('pending', st.pending);
  setText('processing', st.processing);
  setText('oldest', duration(st.oldest_pending_age_seconds));
  setText('retry-waiting', st.retry_waiting);
  setText('oldest-due', duration(st.oldest_due_age_seconds));
  setText('failed', st.failed);
  setText('dead', st.dead_letters);
  setText('published', st.published);
  document.getElementById('failed').classList.toggle('bad', st.failed > 0);
  document.getElementById('dead').classList.toggle('bad', st.dead_letters > 0);
  const stalled = st.oldest_due_age_seconds >= STALLED_DUE_S;
  document.getElementById('oldest-due').classList.toggle('bad', stalled);
  const verdict = document.getElementById('relay-verdict');
  verdict.dataset.verdict = stalled ? 'stalled' : st.retry_waiting > 0 ? 'backoff' : 'ok';
  verdict.className = 'verdict ' + (stalled ? 'bad' : st.retry_waiting > 0 ? 'warn' : 'ok');
  verdict.textContent = stalled ?
    'Stalled: an event has been due for ' + duration(st.oldest_due_age_seconds) +
      ' and no relay published it. Is a relay running, and can it reach the database?' :
    st.retry_waiting > 0 ?
    st.retry_waiting + (st.retry_waiting === 1 ? ' event waits' : ' events wait') +
      ' for a retry after a failed publish; the relay keeps up with the rest.' :
    'The relay keeps up: nothing is due for long, nothing waits for a retry.';
  history.push({t: Date.now(), pending: st.pending + st.processing, waiting: st.retry_waiting,
                age: st.oldest_pending_age_seconds, due: st.oldest_due_age_seconds});
  while (history.length > HISTORY_POINTS) history.shift();
  drawCharts(history);
  const spanS = (history[history.length - 1].t - history[0].t) / 1000;
  if (history.length > 1)
    setText('chart-span', 'the last ' + duration(spanS) + ', one sample every ' +
            POLL_MS / 1000 + ' s');
}

// ---- dead events: one row per event, its history, its payload, replay and skip ----

const selectedLetters = new Set(); // dead letter ids ticked, kept across refreshes
const openPayloads = new Set();    // dead letter ids whose payload row is open
let shownLetters = [];             // the dead letter ids of the rows on screen

function historyText(ev) {
  const parts = ['died ' + ev.letters + (ev.letters === 1 ? ' time' : ' times')];
  if (ev.replays > 0)
    parts.push('replayed ' + ev.replays + (ev.replays === 1 ? ' time' : ' times') +
               ', last ' + when(ev.last_replayed_at));
  else
    parts.push('never replayed');
  parts.push('now ' + (ev.event_status || 'gone (the outbox row was deleted)'));
  return parts.join('; ');
}

function payloadText(payload) {
  return typeof payload === 'string' ? payload : JSON.stringify(payload, null, 2);
}

function deadEventRows(ev) {
  const id = ev.dead_letter_id;
  const box = el('input', {data: {select: id}});
  box.type = 'checkbox';
  box.checked = selectedLetters.has(id);
  box.setAttribute('aria-label', 'select dead event ' + ev.source_event_id);
  box.addEventListener('change', () => {
    if (box.checked) selectedLetters.add(id); else selectedLetters.delete(id);
    showSelection();
  });
  const toggle = el('button', {cls: 'link', data: {payload: id}},
                    openPayloads.has(id) ? 'Hide payload' : 'Payload');
  toggle.addEventListener('click', () => {
    if (openPayloads.has(id)) openPayloads.delete(id); else openPayloads.add(id);
    refresh();
  });
  const failed = ev.event_status === 'FAILED';
  const row = el('tr', {data: {deadLetter: id, deadEvent: ev.source_event_id}},
      el('td', null, box),
      el('td', null, ev.source_event_id),
      el('td', null, ev.event_type),
      el('td', {cls: 'error'}, ev.error),
      el('td', null, when(ev.died_at)),
      el('td', {cls: 'history', data: {letters: ev.letters, replays: ev.replays}}, historyText(ev)),
      el('td', {cls: 'actions'}, toggle,
         failed ? confirmButton('Replay', {replay: id},
             () => api('POST', '/dlq/' + encodeURIComponent(id) + '/replay')) : null,
         failed ? confirmButton('Skip', {skip: id},
             () => api('POST', '/dlq/' + encodeURIComponent(id) + '/skip')) : null));
  if (!openPayloads.has(id)) return [row];
  const cell = el('td', null, el('pre', {cls: 'payload', data: {payloadOf: id}},
                                 payloadText(ev.payload)));
  cell.colSpan = 7;
  return [row, el('tr', {cls: 'payload-row'}, cell)];
}

// Runs action on every selected dead letter, one after the other, and reports how many worked.
async function bulk(label, path) {
  const ids = shownLetters.filter((id) => selectedLetters.has(id));
  let done = 0;
  const failures = [];
  for (const id of ids) {
    try {
      await api('POST', '/dlq/' + encodeURIComponent(id) + '/' + path);
      done++;
      selectedLetters.delete(id);
    } catch (e) {
      failures.push(e.message);
    }
  }
  return {[label.toLowerCase()]: done, failed: failures};
}

function showSelection() {
  for (const id of [...selectedLetters]) if (!shownLetters.includes(id)) selectedLetters.delete(id);
  const n = selectedLetters.size;
  setText('dlq-selected', n === 0 ? 'none selected' : n + ' selected');
  const all = document.getElementById('dlq-all');
  all.checked = n > 0 && n === shownLetters.length;
  const holder = document.getElementById('dlq-bulk');
  if (n === 0) {
    holder.replaceChildren();
    return;
  }
  if (holder.childElementCount === 0)
    holder.replaceChildren(
        confirmButton('Replay selected', {bulk: 'replay'}, () => bulk('Replayed', 'replay')),
        confirmButton('Skip selected', {bulk: 'skip'}, () => bulk('Skipped', 'skip')));
}

function showDeadEvents(d) {
  const events = d.dead_events;
  shownLetters = events.map((ev) => ev.dead_letter_id);
  fillBody('dlq', events.flatMap(deadEventRows), 'No dead events.', 7);
  setText('dlq-count', events.length >= DLQ_LIMIT ? '(the oldest ' + DLQ_LIMIT + ')' : '');
  showSelection();
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
        el('td', {cls: 'mono'}, el('a', {href: '#/saga/' + encodeURIComponent(g.saga_id)},
                                   g.saga_id)),
        el('td', null, g.saga_type),
        el('td', {cls: g.status === 'COMPENSATION_FAILED' ? 'bad' : 'warn'}, g.status),
        el('td', null, deadlineText(g.deadline) ||
           (step ? step.step + '. ' + step.name + ' (' + step.status + ')' : '')),
        el('td', {cls: 'error'}, step && step.error ? step.error : ''),
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
      el('td', {cls: 'error'}, a.last_error || ''),
      el('td', {cls: 'count'}, a.waiting)));
  fillBody('parked', rows, 'No aggregate is held back.', 6);
  setText('parked-count', rows.length >= PARKED_LIMIT ? '(the oldest ' + PARKED_LIMIT + ')' : '');
}

async function refresh() {
  try {
    const [stats, dlq, sagas, procs] = await Promise.all([
      api('GET', '/outbox/stats'), api('GET', '/dlq/events?limit=' + DLQ_LIMIT),
      api('GET', '/sagas'), api('GET', '/processes')]);
    showOutbox(stats);
    showDeadEvents(dlq);
    showSagas(sagas);
    showProcesses(procs);
    if (polls++ % PARKED_EVERY === 0)
      showParked(await api('GET', '/outbox/parked?limit=' + PARKED_LIMIT));
    document.body.dataset.loaded = 'true';
    if (Date.now() > statusHoldUntil)
      setStatus('updated ' + new Date().toLocaleTimeString(), false);
  } catch (e) {
    showError(e);
  }
}

function showError(e) {
  if (e instanceof ApiError && e.status === 401) {
    setStatus('The admin endpoints need the token: enter it above.', true);
    document.getElementById('token').focus();
  } else {
    setStatus(e.message, true);
  }
}

// ---- routing: the fragment names the page ----

function route() {
  const h = window.location.hash;
  let m;
  const page = (m = /^#\/saga\/(.+)$/.exec(h)) ? {kind: 'saga', id: decodeURIComponent(m[1])} :
    (m = /^#\/search\/(.+)$/.exec(h)) ? {kind: 'search', q: decodeURIComponent(m[1])} :
    (m = /^#\/record\/([a-z0-9_-]+)\/(.+)$/.exec(h)) ?
      {kind: 'record', recordKind: m[1], q: decodeURIComponent(m[2])} : null;
  document.getElementById('overview').hidden = page !== null;
  document.getElementById('page').hidden = page === null;
  if (page !== null) showPage(page).catch(showError);
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
  document.getElementById('search-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = document.getElementById('search').value.trim();
    if (q !== '') window.location.hash = '#/search/' + encodeURIComponent(q);
  });
  document.getElementById('dlq-all').addEventListener('change', (ev) => {
    for (const id of shownLetters) {
      if (ev.target.checked) selectedLetters.add(id); else selectedLetters.delete(id);
    }
    refresh();
  });
  window.addEventListener('hashchange', route);
  route();
  refresh();
  setInterval(refresh, POLL_MS);
}

document.addEventListener('DOMContentLoaded', start);
