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
//                     letter row whose HTML-looking error is shown as text, and a saga row
//                     needing attention
//   replay ID         clicks Replay (twice: the button asks for a confirmation) on dead letter
//                     ID and waits for the page to report it done
//   retry SAGA_ID     the same with Retry on a saga
//   alive ROLE        a process of ROLE is listed as alive
//   gone ROLE         no process of ROLE is listed any more
//   stale ROLE        a process of ROLE is listed as stale (its heartbeat is too old)
//   screenshot FILE   after WAIT_S seconds (default 60), a PNG of the whole page, 1280 px
//                     wide (docs/img/dashboard.png: see docs/service.md)
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
  await waitFor('document.querySelector("#dlq tr[data-dead-letter]")', 'a dead letter row');
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
case 'replay':
case 'retry': {
  const sel = step === 'replay' ? `button[data-replay=${q(arg)}]` : `button[data-retry=${q(arg)}]`;
  await waitFor(`document.querySelector(${q(sel)})`, 'the button ' + sel);
  await click(sel); // arms it
  await waitFor(`document.querySelector(${q(sel)}).classList.contains('armed')`,
                'the button asking for confirmation');
  await click(sel); // confirms
  const label = step === 'replay' ? 'Replay done' : 'Retry done';
  await waitFor(`document.getElementById('status').textContent.startsWith(${q(label)})`,
                'the page to report "' + label + '"');
  break;
}
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
case 'screenshot': {
  // For the docs: ARG is the PNG to write; the page runs WAIT_S seconds first (environment,
  // default 60) so that its chart has a history, at 1280 px wide, the whole page.
  const waitS = Number(process.env.WAIT_S || 60);
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
  writeFileSync(arg, Buffer.from(shot.data, 'base64'));
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
