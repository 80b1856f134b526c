// Drives the operator's dashboard (GET /ui of `txo serve`) in a headless Chromium over the
// DevTools protocol, for tests/integration/test_dashboard.c: one step per run, each in a tab of
// its own that loads the page, does what the step says, and fails (exit 1, the reason on
// stderr) when the page logged an error or threw, or when what it shows is not what the step
// expects within the timeout.
//
//   node dashboard_driver.mjs CDP_PORT PAGE_URL STEP [ARG]
//
// Steps:
//   load N            the page shows N pending events (the backlog the test made), a dead
//                     event row whose HTML-looking error is shown as text, and a saga row
//                     needing attention
//   stalled           the outbox card says the relay is stalled: an event due for a minute
//                     or more, none waiting for a retry
//   backoff AGE_S     one event waits for its retry and none is due: the card says backoff,
//                     and "oldest not published" still shows its age (AGE_S seconds or more)
//   charts            the two charts have scales of their own: distinct, increasing round
//                     ticks from 0, counts without a unit, ages with one
//   history EV,L,R    one row for outbox event EV among the dead events, that died L times
//                     and was replayed R times
//   payload ID        the payload view of dead letter ID opens and shows its JSON as text
//   skip ID           clicks Skip (and confirms) on dead letter ID; its row leaves the list
//   bulk-replay A,B   ticks dead letters A and B, clicks Replay selected (and confirms)
//   saga ID           the search box finds saga ID; its page shows its steps, the failed
//                     refund's error in full and the compensation plan, last step first
//   order ID,SAGA     the search box finds order ID; its page shows its items and status and
//                     links to saga SAGA, whose page the link opens
//   replay ID         clicks Replay (twice: the button asks for a confirmation) on dead letter
//                     ID and waits for the page to report it done
//   retry SAGA_ID     the same with Retry on a saga
//   alive ROLE        a process of ROLE is listed as alive
//   gone ROLE         no process of ROLE is listed any more
//   stale ROLE        a process of ROLE is listed as stale (its heartbeat is too old)
//   screenshot FILE   after WAIT_S seconds (default 60), a PNG of the whole page, 1280 px
//                     wide (docs/img/dashboard.png: see docs/service.md)
//   artifact FILE[,FRAGMENT]  the same after two refreshes (so the charts have lines), of
//                     the page at FRAGMENT ("#/saga/ID", ...; default the overview): the
//                     test's record of what the page looked like
//
// Console messages of level error, uncaught exceptions and browser log errors (failed loads,
// Content-Security-Policy violations) all count as errors.
import WebSocket from 'ws';

const [cdpPort, pageUrl, step, arg] = process.argv.slice(2);
const TIMEOUT_MS = 15000;

function die(msg) {
  process.stderr.write('dashboard_driver: ' + msg + '\n');
  process.exit(1);
}

if (!cdpPort || !pageUrl || !step) die('usage: dashboard_driver.mjs CDP_PORT PAGE_URL STEP [ARG]');

const base = 'http://127.0.0.1:' + cdpPort;
const target = await (await fetch(base + '/json/new?about:blank', {method: 'PUT'})).json();
const ws = new WebSocket(target.webSocketDebuggerUrl, {perMessageDeflate: false});
await new Promise((resolve, reject) => {
  ws.once('open', resolve);
  ws.once('error', reject);
});

let nextId = 1;
const pending = new Map();
const errors = [];
ws.on('message', (data) => {
  const msg = JSON.parse(data.toString());
  if (msg.id !== undefined) {
    const p = pending.get(msg.id);
    pending.delete(msg.id);
    if (msg.error) p.reject(new Error(p.method + ': ' + msg.error.message));
    else p.resolve(msg.result);
    return;
  }
  if (msg.method === 'Runtime.consoleAPICalled' &&
      (msg.params.type === 'error' || msg.params.type === 'assert')) {
    errors.push('console.' + msg.params.type + ': ' +
                msg.params.args.map((a) => a.value ?? a.description ?? '').join(' '));
  } else if (msg.method === 'Runtime.exceptionThrown') {
    const d = msg.params.exceptionDetails;
    errors.push('exception: ' + (d.exception && d.exception.description ? d.exception.description
                                                                         : d.text));
  } else if (msg.method === 'Log.entryAdded' && msg.params.entry.level === 'error') {
    errors.push('log: ' + msg.params.entry.text + ' ' + (msg.params.entry.url || ''));
  }
});

function send(method, params = {}) {
  const id = nextId++;
  ws.send(JSON.stringify({id, method, params}));
  return new Promise((resolve, reject) => pending.set(id, {resolve, reject, method}));
}

async function evaluate(expression) {
  const r = await send('Runtime.evaluate', {expression, returnByValue: true, awaitPromise: true});
  if (r.exceptionDetails) throw new Error('evaluate: ' + r.exceptionDetails.text);
  return r.result.value;
}

function checkErrors() {
  if (errors.length > 0) die('the page reported errors:\n  ' + errors.join('\n  '));
}

// Polls a page expression until it is true; fails with `what` and what the page shows.
async function waitFor(expression, what) {
  const t0 = Date.now();
  while (Date.now() - t0 < TIMEOUT_MS) {
    checkErrors();
    if (await evaluate('Boolean(' + expression + ')')) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  const shown = await evaluate('document.getElementById("status").textContent');
  die('timed out waiting for ' + what + ' (page status: "' + shown + '")');
}

// A real mouse click in the middle of the element.
async function click(selector) {
  const box = await evaluate(`(() => {
    const e = document.querySelector(${JSON.stringify(selector)});
    if (!e) return null;
    e.scrollIntoView({block: 'center'});
    const r = e.getBoundingClientRect();
    return {x: r.left + r.width / 2, y: r.top + r.height / 2};
  })()`);
  if (box === null) die('no element ' + selector + ' to click');
  for (const type of ['mousePressed', 'mouseReleased'])
    await send('Input.dispatchMouseEvent', {type, x: box.x, y: box.y, button: 'left',
                                            clickCount: 1});
}

// Types text into the search box and submits it, as an operator does.
async function search(text) {
  await click('#search');
  await send('Input.insertText', {text});
  await click('#search-form button[type=submit]');
}

await send('Runtime.enable');
await send('Log.enable');
await send('Page.enable');
await send('Page.navigate', {url: pageUrl});
await waitFor('document.body && document.body.dataset.loaded === "true"', 'the first refresh');
if (await evaluate('window.location.hash') !== '')
  die('the token was left in the address bar: ' + (await evaluate('window.location.href')));

const q = (s) => JSON.stringify(s);
switch (step) {
case 'load':
  await waitFor(`document.getElementById('pending').textContent === ${q(arg)}`,
                'the backlog of ' + arg + ' pending events');
  await waitFor('document.querySelector("#dlq tr[data-dead-letter]")', 'a dead event row');
  // Text from the database is text: an error that looks like HTML stays a string.
  if (await evaluate('document.getElementById("injected") !== null'))
    die('the dead letter\'s error text was put into the page as HTML');
  if (!(await evaluate('document.querySelector("#dlq td.error").textContent.includes("<b")')))
    die('the dead letter\'s error text is not shown as it is');
  await waitFor('document.querySelector("#attention tr[data-saga]")', 'a saga row');
  // A running saga past its deadline, under a live owner, says which deadline it passed.
  await waitFor('Array.from(document.querySelectorAll("#attention tr[data-saga]"))' +
                '.some((tr) => tr.textContent.includes("past its saga deadline"))',
                'the saga past its deadline');
  // The FAILED event holds its aggregate back (GET /outbox/parked).
  await waitFor('Array.from(document.querySelectorAll("#parked tr[data-parked] td.mono"))' +
                '.some((td) => td.textContent === "order/4242")', 'the parked aggregate order/4242');
  break;
case 'alive':
  await waitFor(`[...document.querySelectorAll('#processes tr[data-owner]')].some(
                   (r) => r.dataset.alive === 'true' && r.children[1].textContent === ${q(arg)})`,
                'a live ' + arg + ' process');
  break;
case 'stale':
  await waitFor(`[...document.querySelectorAll('#processes tr[data-owner]')].some(
                   (r) => r.dataset.alive === 'false' && r.children[1].textContent === ${q(arg)}
                          && r.children[5].textContent === 'stale')`,
                'a stale ' + arg + ' process');
  break;
case 'gone':
  await waitFor(`![...document.querySelectorAll('#processes tr[data-owner]')].some(
                   (r) => r.children[1].textContent === ${q(arg)})`,
                'the ' + arg + ' process to leave the list');
  break;
case 'stalled':
  await waitFor(`document.getElementById('relay-verdict').dataset.verdict === 'stalled'`,
                'the verdict "stalled"');
  if (await evaluate(`document.getElementById('retry-waiting').textContent`) !== '0')
    die('events waiting for a retry shown in a plain stalled backlog');
  if (!/^(6\d|[7-9]\d|1[01]\d) s$|min$/.test(await evaluate(
      `document.getElementById('oldest-due').textContent`)))
    die('the oldest due event is not shown as a minute old or more: ' +
        await evaluate(`document.getElementById('oldest-due').textContent`));
  break;
case 'backoff':
  await waitFor(`document.getElementById('relay-verdict').dataset.verdict === 'backoff'`,
                'the verdict "backoff"');
  await waitFor(`document.getElementById('retry-waiting').textContent === '1' &&
                 document.getElementById('oldest-due').textContent === '0 s'`,
                'one event waiting for a retry and none due');
  {
    const shown = await evaluate(`document.getElementById('oldest').textContent`);
    const m = /^(\d+) (s|min)$/.exec(shown);
    if (!m || Number(m[1]) * (m[2] === 'min' ? 60 : 1) < Number(arg))
      die('"oldest not published" is ' + shown + ', want at least ' + arg + ' s');
    const help = await evaluate(`document.querySelector('#retry-waiting').parentElement.title`);
    if (!help.includes('retry')) die('no help text on "waiting for a retry": ' + help);
  }
  break;
case 'charts': {
  // Two samples at least, so that the lines are drawn too.
  await new Promise((r) => setTimeout(r, 3500));
  for (const [id, unit] of [['backlog-chart', false], ['age-chart', true]]) {
    const ticks = (await evaluate(`document.getElementById(${q(id)}).dataset.ticks || ''`))
      .split('|');
    const values = ticks.map((t) => Number(t.split(' ')[0]));
    if (ticks.length < 2 || values[0] !== 0 || new Set(ticks).size !== ticks.length ||
        values.some((v, i) => i > 0 && !(v > values[i - 1])) ||
        values.some((v) => !Number.isInteger(v)))
      die(id + ': ticks not distinct increasing round numbers from 0: ' + ticks.join(', '));
    if (unit && !ticks.every((t) => / (s|min|h)$/.test(t)))
      die(id + ': ticks without a unit: ' + ticks.join(', '));
    if (!unit && ticks.some((t) => t.includes(' ')))
      die(id + ': counts with a unit: ' + ticks.join(', '));
  }
  // The counts' scale reaches the backlog, and is not the ages' scale.
  const pending = Number(await evaluate(`document.getElementById('pending').textContent`));
  const top = Number((await evaluate(`document.getElementById('backlog-chart').dataset.ticks`))
    .split('|').pop());
  if (top < pending) die('the counts scale tops at ' + top + ', below ' + pending + ' pending');
  break;
}
case 'history': {
  const [ev, letters, replays] = arg.split(',');
  const rows = `[...document.querySelectorAll('#dlq tr[data-dead-event=${q(ev)}]')]`;
  await waitFor(`${rows}.length === 1 && ${rows}[0].querySelector('td.history').dataset.letters
                 === ${q(letters)} && ${rows}[0].querySelector('td.history').dataset.replays
                 === ${q(replays)}`,
                'one row for event ' + ev + ' that died ' + letters + ' times, replayed ' +
                replays);
  const text = await evaluate(`${rows}[0].querySelector('td.history').textContent`);
  if (!text.includes('died ' + letters + ' times') || !text.includes('replayed ' + replays))
    die('the history of event ' + ev + ' reads: ' + text);
  break;
}
case 'payload': {
  const button = `button[data-payload=${q(arg)}]`;
  await waitFor(`document.querySelector(${q(button)})`, 'the payload button');
  await click(button);
  const pre = `pre[data-payload-of=${q(arg)}]`;
  await waitFor(`document.querySelector(${q(pre)}) &&
                 document.querySelector(${q(pre)}).textContent.includes('"order_id": 4242')`,
                'the payload of dead letter ' + arg);
  if (await evaluate(`document.querySelector(${q(pre)}).children.length`) !== 0)
    die('the payload view holds elements, not text');
  break;
}
case 'skip':
case 'replay':
case 'retry': {
  const attr = step === 'retry' ? 'retry' : step;
  const sel = `button[data-${attr}=${q(arg)}]`;
  await waitFor(`document.querySelector(${q(sel)})`, 'the button ' + sel);
  await click(sel); // arms it
  await waitFor(`document.querySelector(${q(sel)}).classList.contains('armed')`,
                'the button asking for confirmation');
  await click(sel); // confirms
  const label = {replay: 'Replay done', retry: 'Retry done', skip: 'Skip done'}[step];
  await waitFor(`document.getElementById('status').textContent.startsWith(${q(label)})`,
                'the page to report "' + label + '"');
  if (step === 'skip')
    await waitFor(`!document.querySelector('#dlq tr[data-dead-letter=${q(arg)}]')`,
                  'the skipped event to leave the list');
  break;
}
case 'bulk-replay': {
  for (const id of arg.split(',')) {
    const box = `input[data-select=${q(id)}]`;
    await waitFor(`document.querySelector(${q(box)})`, 'the checkbox of dead letter ' + id);
    await click(box);
    await waitFor(`document.querySelector(${q(box)}).checked`, 'dead letter ' + id + ' ticked');
  }
  await waitFor(`document.getElementById('dlq-selected').textContent === '2 selected'`,
                'two selected');
  const sel = 'button[data-bulk=replay]';
  await click(sel);
  await waitFor(`document.querySelector(${q(sel)}).classList.contains('armed')`,
                'the bulk button asking for confirmation');
  await click(sel);
  await waitFor(`document.getElementById('status').textContent.startsWith(
                   'Replay selected done: {"replayed":2,"failed":[]}')`,
                'the page to report both replayed');
  break;
}
case 'saga': {
  await search(arg);
  await waitFor(`window.location.hash === ${q('#/saga/' + arg)} &&
                 document.getElementById('page-body').dataset.page === 'saga'`,
                'the saga page of ' + arg);
  if (!(await evaluate(`document.getElementById('overview').hidden &&
                        getComputedStyle(document.getElementById('overview')).display === 'none'`)))
    die('the overview is still shown on the saga page');
  const steps = await evaluate(`[...document.querySelectorAll('ol.timeline li[data-step]')]
                                  .map((li) => li.dataset.step + ':' + li.dataset.status)`);
  if (steps.length < 3 || !steps.includes('2:COMPENSATION_FAILED'))
    die('the saga page shows the steps ' + steps.join(', '));
  const error = await evaluate(`document.querySelector(
      'li[data-step="2"] pre.error').textContent`);
  if (!error.includes('refund failed')) die('the failed refund\'s error reads: ' + error);
  const plan = await evaluate(`[...document.querySelectorAll('ol.plan li')]
                                 .map((li) => li.dataset.planStep)`);
  if (plan.length < 1 || plan.some((s, i) => i > 0 && Number(s) >= Number(plan[i - 1])) ||
      !plan.includes('2'))
    die('the compensation plan is not last step first with step 2: ' + plan.join(', '));
  break;
}
case 'order': {
  const [order, saga] = arg.split(',');
  await search(order);
  await waitFor(`window.location.hash === ${q('#/record/order/' + order)} &&
                 document.querySelector('article.record[data-kind=order]')`,
                'the page of order ' + order);
  const items = await evaluate(`[...document.querySelectorAll(
      'article.record table[data-table=items] tbody tr')].map((tr) => tr.textContent)`);
  if (items.length !== 1 || !items[0].startsWith('pen'))
    die('the order page shows the items ' + JSON.stringify(items));
  if (!(await evaluate(`document.querySelector('article.record [data-record-status]')`)))
    die('the order page shows no status');
  const link = `a[data-saga-link=${q(saga)}]`;
  await waitFor(`document.querySelector(${q(link)})`, 'the link to saga ' + saga);
  await click(link);
  await waitFor(`document.querySelector('[data-saga-id]') &&
                 document.querySelector('[data-saga-id]').textContent === ${q(saga)}`,
                'the saga page opened from the order');
  break;
}
case 'artifact':
case 'screenshot': {
  // ARG is the PNG to write, at 1280 px wide, the whole page. For the docs the page runs
  // WAIT_S seconds first (environment, default 60) so that its charts have a history.
  const [file, fragment] = arg.split(',');
  if (fragment) {
    await evaluate(`window.location.hash = ${q(fragment)}`);
    await waitFor(`document.getElementById('page-body').dataset.page`, 'the page ' + fragment);
  }
  const waitS = step === 'artifact' ? 4 : Number(process.env.WAIT_S || 60);
  await send('Emulation.setDeviceMetricsOverride', {width: 1280, height: 900,
                                                    deviceScaleFactor: 1, mobile: false});
  await new Promise((r) => setTimeout(r, waitS * 1000));
  checkErrors();
  const height = await evaluate('Math.ceil(document.documentElement.scrollHeight)');
  await send('Emulation.setDeviceMetricsOverride', {width: 1280, height,
                                                    deviceScaleFactor: 1, mobile: false});
  await new Promise((r) => setTimeout(r, 500));
  const shot = await send('Page.captureScreenshot', {format: 'png'});
  const {writeFileSync} = await import('node:fs');
  writeFileSync(file, Buffer.from(shot.data, 'base64'));
  break;
}
default:
  die('unknown step ' + step);
}
// One more refresh cycle, to catch errors that come late.
await new Promise((r) => setTimeout(r, 500));
checkErrors();
await fetch(base + '/json/close/' + target.id);
ws.close();
process.stdout.write('dashboard_driver: ' + step + (arg ? ' ' + arg : '') + ' ok\n');
