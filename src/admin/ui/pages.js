// The dashboard's pages besides the overview (app.js routes to them by the address's fragment):
//   #/saga/ID            a saga: its steps as a timeline and its compensation plan
//                        (GET /sagas/{id});
//   #/search/TEXT        what GET /search found: one result goes straight to its page;
//   #/record/KIND/TEXT   a record of the service found by TEXT (an order of the order service),
//                        drawn from the generic shape the service's finder answers: title,
//                        status, fields, tables and the sagas it names (txo/admin.h).
// Everything from the API is put in with textContent (el(), app.js), never as HTML.
'use strict';

function pageBody(...children) {
  document.getElementById('page-body').replaceChildren(
      ...children.filter((c) => c !== null && c !== undefined));
}

function sagaLink(id) {
  return el('a', {cls: 'mono', href: '#/saga/' + encodeURIComponent(id), data: {sagaLink: id}}, id);
}

// RFC 3339 with microseconds, read by Date.parse with milliseconds only.
function ms(rfc3339) {
  return rfc3339 ? Date.parse(rfc3339.replace(/(\.\d{3})\d+Z$/, '$1Z')) : NaN;
}

function facts(pairs) {
  const dl = el('dl', {cls: 'facts'});
  for (const [k, v] of pairs) {
    if (v === null || v === undefined || v === '') continue;
    dl.append(el('dt', null, k), el('dd', null, v));
  }
  return dl;
}

// When a deadline is, and, while it still matters (live), whether it passed.
function deadline(at, live) {
  if (!at) return '';
  if (!live) return when(at);
  const left = (ms(at) - Date.now()) / 1000;
  return when(at) + (left >= 0 ? ' (in ' + duration(left) + ')' : ' (passed ' + duration(-left) +
                     ' ago)');
}

// The statuses of a saga or a step still under way, whose deadlines still matter.
const LIVE = new Set(['RUNNING', 'COMPENSATING']);

// How long after the change before it (the saga's start or another step's last change) each
// step last changed: what its last action or compensation took, steps running one at a time.
function stepDurations(g) {
  const changes = g.steps.filter((s) => s.status !== 'PENDING' && s.updated_at)
    .map((s) => ({step: s.step, t: ms(s.updated_at)})).sort((a, b) => a.t - b.t);
  const out = new Map();
  let prev = ms(g.created_at);
  for (const c of changes) {
    if (!Number.isNaN(prev)) out.set(c.step, duration((c.t - prev) / 1000));
    prev = c.t;
  }
  return out;
}

function stepItem(s, took) {
  return el('li', {cls: 'step ' + s.status.toLowerCase(), data: {step: s.step, status: s.status}},
      el('div', {cls: 'step-head'},
         el('span', {cls: 'step-name'}, s.step + '. ' + s.name),
         el('span', {cls: 'badge'}, s.status)),
      facts([['attempts', s.attempts], ['remote part', s.remote],
             ['last change', when(s.updated_at)],
             ['took (since the change before)', took],
             ['step deadline', deadline(s.deadline_at, LIVE.has(s.status))],
             ['current call deadline', deadline(s.try_deadline, LIVE.has(s.status))],
             ['error code', s.error_code]]),
      s.error ? el('pre', {cls: 'error full'}, s.error) : null);
}

function planCaption(status) {
  switch (status) {
  case 'COMPLETED': return 'The saga completed: nothing will be compensated.';
  case 'FAILED': return 'The saga failed with nothing to compensate.';
  case 'RUNNING': return 'If a step fails now, these steps are compensated, in this order:';
  default: return 'Compensation, in this order (last step first):';
  }
}

async function showSaga(id) {
  pageBody(el('p', {cls: 'muted'}, 'loading saga ' + id + '...'));
  const g = await api('GET', '/sagas/' + encodeURIComponent(id));
  const took = stepDurations(g);
  const steps = g.steps.map((s) => stepItem(s, took.get(s.step) || ''));
  const plan = g.status === 'COMPLETED' || g.status === 'FAILED' ? [] :
    g.compensation_plan.map((p) => el('li', {data: {planStep: p.step, state: p.state}},
        p.name + ' (step ' + p.step + '): undo ' + p.undo + ', ' + p.state));
  pageBody(
      el('h2', null, 'Saga ', el('span', {cls: 'mono', data: {sagaId: g.saga_id}}, g.saga_id)),
      facts([['type', g.saga_type], ['correlation', g.correlation_id],
             ['status', g.status], ['owner', g.owner || 'none'],
             ['started', when(g.created_at)], ['last change', when(g.updated_at)],
             ['idle for', duration(g.idle_seconds)],
             ['saga deadline', deadline(g.deadline_at, LIVE.has(g.status))],
             ['compensation tries', g.compensation_tries +
              (g.status === 'COMPENSATION_FAILED' ?
                (g.retry_scheduled ? ' (retry scheduled)' : ' (given up)') : '')]]),
      g.status === 'COMPENSATION_FAILED' ?
        confirmButton('Retry', {retry: g.saga_id},
            () => api('POST', '/sagas/' + encodeURIComponent(g.saga_id) + '/retry')) : null,
      el('h3', null, 'Steps'),
      el('ol', {cls: 'timeline', data: {steps: g.steps.length}}, ...steps),
      el('h3', null, 'Compensation plan'),
      el('p', {cls: 'muted'}, planCaption(g.status)),
      el('ol', {cls: 'plan', data: {plan: plan.length}}, ...plan));
  document.getElementById('page-body').dataset.page = 'saga';
}

function recordView(kind, q, r) {
  const fields = Object.entries(r.fields || {}).map(([k, v]) =>
    [k, typeof v === 'object' && v !== null ? JSON.stringify(v) : v]);
  const tables = (r.tables || []).map((t) => {
    const head = el('tr', null, ...(t.columns || []).map((c) => el('th', null, c)));
    const rows = (t.rows || []).map((row) => el('tr', null,
        ...row.map((v) => el('td', null, typeof v === 'object' && v !== null ?
                                           JSON.stringify(v) : v))));
    return el('div', null, el('h3', null, t.title || ''),
              el('table', {cls: 'record-table', data: {table: t.title || ''}},
                 el('thead', null, head), el('tbody', null, ...rows)));
  });
  const sagas = (r.sagas || []).map((id) => el('li', null, sagaLink(id)));
  return el('article', {cls: 'record', data: {kind, record: q}},
      el('h2', null, r.title || kind + ' ' + q,
         r.status ? el('span', {cls: 'badge', data: {recordStatus: r.status}}, r.status) : null),
      facts(fields), ...tables,
      el('h3', null, 'Sagas'),
      sagas.length > 0 ? el('ul', null, ...sagas) : el('p', {cls: 'muted'}, 'none'));
}

async function showSearch(q, onlyKind) {
  pageBody(el('p', {cls: 'muted'}, 'searching ' + q + '...'));
  const r = await api('GET', '/search?q=' + encodeURIComponent(q));
  const results = onlyKind ? r.results.filter((x) => x.kind === onlyKind) : r.results;
  if (!onlyKind && results.length === 1) {
    const only = results[0];
    window.location.replace(only.kind === 'saga' ? '#/saga/' + encodeURIComponent(only.id) :
      '#/record/' + only.kind + '/' + encodeURIComponent(q));
    return;
  }
  const views = results.map((x) => x.kind === 'saga' ?
    el('p', {data: {result: 'saga'}}, 'Saga ', sagaLink(x.id), ' ' + x.title + ', ' + x.status) :
    recordView(x.kind, q, x.record));
  pageBody(onlyKind ? null : el('h2', null, 'Search: ' + q),
           ...(views.length > 0 ? views :
               [el('p', {cls: 'muted', data: {result: 'none'}},
                   'Nothing found: no saga has this id, and nothing else this service knows.')]));
  document.getElementById('page-body').dataset.page = onlyKind ? 'record' : 'search';
}

async function showPage(page) {
  document.getElementById('page-body').dataset.page = '';
  if (page.kind === 'saga') return showSaga(page.id);
  if (page.kind === 'record') return showSearch(page.q, page.recordKind);
  return showSearch(page.q, null);
}
