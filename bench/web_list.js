// web_list.js - the page of conversations (GET /) at N conversations, in a
// real browser (Debian's chromium, headless, driven by playwright-core from
// tests/node), against a real `parley serve` on 127.0.0.1:
//   1. the data: `PARLEY bench conversations --count N --dir SCRATCH` (each
//      conversation given 3 events; SCRATCH/data is a data directory, its
//      summaries written at the bench's clean close);
//   2. REST, each a fresh connection, wall clock in node from the request
//      sent to the whole answer read: a search of 20 (the default order,
//      by update time, by status idle) and a count by status; the very
//      first request by status after the start is reported apart;
//   3. the page: from navigation to its rows and total drawn (the page's
//      own clock: performance.now() counts from the navigation's start),
//      then #next, #status 'idle' and #sort 'UPDATED_AT_DESC', each from
//      the click or change event dispatched in the page until the rows and
//      the pager are drawn again (the page's clock, a MutationObserver);
//      no page error, no console error, the total shown is N;
//   4. the server killed (SIGKILL: no summaries saved) and started again:
//      the first count by status (it asks every conversation, 64 at a time)
//      and a second one.
// Usage: node bench/web_list.js PARLEY [--conversations 100000] [--runs 5]
// Prints medians over --runs (min-max beside them). Everything it starts
// (the bench, the servers, the browser) is stopped and the scratch
// directory removed, also on failure; every wait has a deadline.
'use strict';
const path = require('path');
const fs = require('fs');
const os = require('os');
const http = require('http');
const readline = require('readline');
const {spawn, spawnSync} = require('child_process');
const {performance} = require('perf_hooks');
const {chromium} = require(path.join(__dirname, '..', 'tests', 'node', 'node_modules', 'playwright-core'));

function usage(msg) {
  if (msg) console.error('web_list.js: ' + msg);
  console.error('usage: node bench/web_list.js PARLEY [--conversations N] [--runs N]');
  process.exit(2);
}

const args = process.argv.slice(2);
if (args.includes('--help') || args.includes('-h')) usage();
const parley = args[0] && path.resolve(args[0]);
if (!parley || !fs.existsSync(parley)) usage('the parley binary is the first argument');
const opt = {conversations: 100000, runs: 5};
for (let i = 1; i < args.length; i += 2) {
  const k = args[i].replace(/^--/, '');
  if (!(k in opt) || !/^\d+$/.test(args[i + 1] || '') || Number(args[i + 1]) < 1) usage('bad option ' + args[i]);
  opt[k] = Number(args[i + 1]);
}
const N = opt.conversations;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const LIMIT = 50; // net/web/list.js's page
// deadlines (ms)
const T_BENCH = 60 * 60 * 1000; // making the data
const T_START = 300 * 1000; // a server's first line
const T_HTTP = 600 * 1000; // one request (the first count after a crash asks everyone)
const T_PAGE = 120 * 1000; // one wait in the browser
const T_ALL = T_BENCH + 60 * 60 * 1000; // the whole run

const children = new Set(); // processes started and not yet gone
let browser = null;
let scratch = null;

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}
function check(cond, msg) {
  if (!cond) throw new Error(msg);
}
function withTimeout(p, ms, what) {
  let timer;
  return Promise.race([p, new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no end in ${ms / 1000} s`)), ms);
  })]).finally(() => clearTimeout(timer));
}
function track(child) {
  children.add(child);
  child.exited = new Promise((r) => child.once('exit', (code, sig) => {
    children.delete(child);
    r({code, sig});
  }));
  return child;
}

// ---- 1. the data ------------------------------------------------------------

async function makeData(dir) {
  const child = track(spawn(parley, ['bench', 'conversations', '--count', String(N), '--dir', dir],
    {stdio: ['ignore', 'pipe', 'inherit']}));
  readline.createInterface({input: child.stdout}).on('line', (l) => console.error('bench conversations: ' + l));
  const {code, sig} = await withTimeout(child.exited, T_BENCH, 'bench conversations');
  check(code === 0, `bench conversations exited ${code} ${sig || ''}`);
  check(fs.existsSync(path.join(dir, 'data')), 'bench conversations left no data directory');
}

// ---- the server ---------------------------------------------------------------

async function serve(data) {
  const t0 = performance.now();
  const child = track(spawn(parley, ['serve', '--data', data, '--listen', '127.0.0.1:0', '--log-level', 'warn'],
    {stdio: ['ignore', 'pipe', 'inherit']}));
  const lines = readline.createInterface({input: child.stdout});
  const port = await withTimeout(new Promise((resolve, reject) => {
    child.exited.then(({code, sig}) => reject(new Error(`parley serve exited ${code} ${sig || ''}`)));
    lines.once('line', (line) => {
      const m = /^listening on http:\/\/[^ ]*:(\d+)$/.exec(line);
      if (!m) return reject(new Error('unexpected first line: ' + line));
      resolve(Number(m[1]));
    });
  }), T_START, 'parley serve');
  return {child, port, startMs: performance.now() - t0};
}

async function stop(srv, signal = 'SIGTERM') {
  if (!children.has(srv.child)) return;
  srv.child.kill(signal);
  const timer = setTimeout(() => srv.child.kill('SIGKILL'), 60000);
  const r = await srv.child.exited;
  clearTimeout(timer);
  if (signal === 'SIGTERM' && r.code !== 0) console.error(`parley serve exited ${r.code} ${r.sig || ''}`);
}

// ---- 2. REST ------------------------------------------------------------------

// GET p on a connection of its own: [ms, parsed body].
function get(srv, p) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = http.request({host: '127.0.0.1', port: srv.port, method: 'GET', path: p, agent: false,
      headers: {Connection: 'close'}}, (res) => {
      let raw = '';
      res.setEncoding('utf8');
      res.on('data', (c) => raw += c);
      res.on('end', () => {
        const ms = performance.now() - t0;
        if (res.statusCode !== 200) return reject(new Error(`GET ${p}: ${res.statusCode} ${raw.slice(0, 300)}`));
        resolve([ms, JSON.parse(raw)]);
      });
      res.on('error', reject);
    });
    req.setTimeout(T_HTTP, () => req.destroy(new Error(`GET ${p}: no answer in ${T_HTTP / 1000} s`)));
    req.on('error', reject);
    req.end();
  });
}

const REST = [
  ['search ?limit=20 (default order)', '/api/conversations/search?limit=20'],
  ['search ?limit=20&sort_order=UPDATED_AT_DESC', '/api/conversations/search?limit=20&sort_order=UPDATED_AT_DESC'],
  ['search ?limit=20&status=idle', '/api/conversations/search?limit=20&status=idle'],
  ['count ?status=idle', '/api/conversations/count?status=idle'],
];

// ---- 3. the page --------------------------------------------------------------

// A new page (a context of its own: nothing cached) opened at /, until its
// rows and the total are drawn: ms from the navigation's start, the page's
// clock.
async function openList(srv, problems) {
  const page = await browser.newPage({viewport: {width: 1280, height: 900}});
  page.setDefaultTimeout(T_PAGE);
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  await page.addInitScript((want) => {
    const drawn = () => {
      const where = document.getElementById('where');
      return where && / of \d+ · page 1\b/.test(where.textContent) &&
        document.querySelectorAll('#rows tr.conv').length === want;
    };
    new MutationObserver((ms, o) => {
      if (drawn()) {
        window.drawnAt = performance.now();
        o.disconnect();
      }
    }).observe(document, {childList: true, subtree: true, characterData: true});
  }, Math.min(N, LIMIT));
  await page.goto(`http://127.0.0.1:${srv.port}/`, {timeout: T_PAGE});
  await page.waitForFunction(() => window.drawnAt !== undefined, null, {timeout: T_PAGE, polling: 50});
  const ms = await page.evaluate(() => window.drawnAt);
  return {page, ms};
}

// What the page shows: the pager's text, the rows' ids.
const shown = (page) => page.evaluate(() => ({
  where: document.getElementById('where').textContent,
  ids: [...document.querySelectorAll('#rows tr.conv')].map((r) => r.dataset.id),
}));

// In the page: act ('next': click #next; or [select id, value]: choose it,
// as a user does, a change event), then wait until the pager says page
// `want` and says something else than before, and the rows are not those
// shown before. ms by the page's clock, from the act to that (the rows
// and the pager are drawn in one task: render, then pager).
async function timeAct(page, act, want) {
  return page.evaluate(({act, want, limit}) => new Promise((resolve, reject) => {
    const where = document.getElementById('where');
    const ids = () => [...document.querySelectorAll('#rows tr.conv')].map((r) => r.dataset.id).join();
    const beforeWhere = where.textContent;
    const beforeIds = ids();
    const page = new RegExp(`· page ${want}\\b`);
    const done = () => where.textContent !== beforeWhere && page.test(where.textContent) &&
      ids() !== beforeIds && document.querySelectorAll('#rows tr.conv').length > 0;
    const timer = setTimeout(() => {
      o.disconnect();
      reject(new Error(`${JSON.stringify(act)}: still "${where.textContent}" after ${limit} ms`));
    }, limit);
    const o = new MutationObserver(() => {
      if (!done()) return;
      const t = performance.now();
      o.disconnect();
      clearTimeout(timer);
      resolve(t - t0);
    });
    o.observe(document.querySelector('main'), {childList: true, subtree: true, characterData: true});
    const t0 = performance.now();
    if (act === 'next') {
      document.getElementById('next').click();
    } else {
      const sel = document.getElementById(act[0]);
      sel.value = act[1];
      sel.dispatchEvent(new Event('input', {bubbles: true}));
      sel.dispatchEvent(new Event('change', {bubbles: true}));
    }
  }), {act, want, limit: T_PAGE});
}

async function pageRun(srv, problems, idleCount) {
  const {page, ms: nav} = await openList(srv, problems);
  try {
    const first = await shown(page);
    check(first.ids.length === Math.min(N, LIMIT), `${first.ids.length} rows on the first page`);
    const total = Number((/ of (\d+) · page/.exec(first.where) || [])[1]);
    check(total === N, `the page shows a total of ${total}, not ${N}: "${first.where}"`);
    const next = await timeAct(page, 'next', 2);
    // from page 2, so that the rows must change even if the filter or the
    // order keeps the first page as it was
    const status = await timeAct(page, ['status', 'idle'], 1);
    const filtered = await shown(page);
    const idleShown = Number((/ of (\d+) · page/.exec(filtered.where) || [])[1]);
    check(idleShown === idleCount, `the page shows ${idleShown} idle, REST counts ${idleCount}`);
    await timeAct(page, 'next', 2); // not timed: back to page 2 before the order changes
    const sort = await timeAct(page, ['sort', 'UPDATED_AT_DESC'], 1);
    check(new URL(page.url()).searchParams.get('sort') === 'UPDATED_AT_DESC', 'the order is in the URL');
    return {nav, next, status, sort};
  } finally {
    await page.context().close().catch(() => {});
  }
}

// ---- the run ------------------------------------------------------------------

function cleanupSync() {
  for (const c of children) {
    try {
      c.kill('SIGKILL');
    } catch (e) { /* gone */ }
  }
  if (scratch) {
    // N conversations are 2-3 files each: rm(1) is quicker than fs.rmSync
    console.error('removing ' + scratch);
    spawnSync('rm', ['-rf', '--', scratch], {stdio: 'inherit', timeout: 30 * 60 * 1000});
    fs.rmSync(scratch, {recursive: true, force: true});
  }
  scratch = null;
}

async function cleanup() {
  if (browser) await withTimeout(browser.close(), 30000, 'closing chromium').catch((e) => console.error(String(e)));
  browser = null;
  for (const c of [...children]) {
    c.kill('SIGTERM');
    const timer = setTimeout(() => c.kill('SIGKILL'), 30000);
    await c.exited;
    clearTimeout(timer);
  }
  cleanupSync();
}

async function run() {
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-web-list.'));
  const data = path.join(scratch, 'data');
  console.error(`making ${N} conversations (bench conversations) in ${scratch}`);
  const tb = performance.now();
  await makeData(scratch);
  const benchS = (performance.now() - tb) / 1000;

  // 2. REST
  let srv = await serve(data);
  const startMs = srv.startMs;
  const [firstFiltered, firstBody] = await get(srv, REST[2][1]);
  check(Array.isArray(firstBody.items), 'a search answers items');
  const rest = REST.map(() => []);
  let idleCount = null;
  for (let r = 0; r < opt.runs; r++) {
    for (let i = 0; i < REST.length; i++) {
      const [ms, body] = await get(srv, REST[i][1]);
      rest[i].push(ms);
      if (i === 0) check(body.items.length === Math.min(N, 20), `search gave ${body.items.length} items`);
      if (i === 3) idleCount = body;
    }
  }
  check(Number.isInteger(idleCount), 'count answers a number: ' + JSON.stringify(idleCount));
  const [, total] = await get(srv, '/api/conversations/count');
  check(total === N, `the server counts ${total} conversations, not ${N}`);
  console.error(`REST done (${idleCount} of ${N} idle); the page, ${opt.runs} runs`);

  // 3. the page
  browser = await chromium.launch({executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'],
    timeout: T_PAGE, handleSIGINT: false, handleSIGTERM: false, handleSIGHUP: false}); // ours close it
  const problems = [];
  const runs = [];
  for (let r = 0; r < opt.runs; r++) {
    const x = await pageRun(srv, problems, idleCount);
    runs.push(x);
    console.error(`run ${r + 1}: navigation ${x.nav.toFixed(0)} ms, next ${x.next.toFixed(0)} ms, ` +
      `status ${x.status.toFixed(0)} ms, sort ${x.sort.toFixed(0)} ms`);
  }
  await browser.close();
  browser = null;

  // 4. a crash: no summaries saved
  await stop(srv, 'SIGKILL');
  srv = await serve(data);
  const restartMs = srv.startMs;
  const [crash1, c1] = await get(srv, REST[3][1]);
  const [crash2, c2] = await get(srv, REST[3][1]);
  check(c1 === idleCount && c2 === idleCount, `after the crash: ${c1} and ${c2} idle, before ${idleCount}`);
  await stop(srv);

  // the table
  const f = (ms) => (ms >= 10000 ? (ms / 1000).toFixed(1) + ' s' : ms >= 100 ? ms.toFixed(0) + ' ms'
    : ms.toFixed(1) + ' ms');
  const row = (what, xs) => [what, f(median(xs)), `${f(Math.min(...xs))} - ${f(Math.max(...xs))}`];
  const table = [
    ['what', `median of ${opt.runs}`, 'min - max'],
    ...REST.map(([what], i) => row('GET ' + what, rest[i])),
    ['GET search ?limit=20&status=idle, the first after start', f(firstFiltered), ''],
    row('page: navigation to rows and total drawn', runs.map((x) => x.nav)),
    row('page: #next until page 2 drawn', runs.map((x) => x.next)),
    row("page: #status 'idle' until drawn", runs.map((x) => x.status)),
    row("page: #sort 'UPDATED_AT_DESC' until drawn", runs.map((x) => x.sort)),
    ['after SIGKILL: first GET count ?status=idle', f(crash1), ''],
    ['after SIGKILL: second GET count ?status=idle', f(crash2), ''],
  ];
  const w = [0, 1, 2].map((c) => Math.max(...table.map((t) => t[c].length)));
  console.log(`${N} conversations (${idleCount} idle); data made in ${benchS.toFixed(0)} s; ` +
    `server start ${f(startMs)}, after SIGKILL ${f(restartMs)}`);
  for (const t of table) console.log(t.map((c, i) => (i ? c.padStart(w[i]) : c.padEnd(w[i]))).join('  '));
  console.log('REST: node wall clock, a new connection each; page: the page\'s own clock ' +
    '(performance.now(): navigation from its start, the others from the click/change in the page ' +
    'to the rows and pager in the DOM)');
  if (problems.length) throw new Error('the page reported errors:\n  ' + problems.join('\n  '));
  console.log('page errors: none; total shown: ' + N);
}

const watchdog = setTimeout(() => {
  console.error(`web_list.js: no end in ${T_ALL / 60000} min; stopping`);
  cleanup().finally(() => process.exit(1));
}, T_ALL);
watchdog.unref();
for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(s, () => {
    console.error('web_list.js: ' + s);
    cleanup().finally(() => process.exit(1));
  });
}
process.on('exit', cleanupSync);

run().then(() => cleanup()).then(() => process.exit(0)).catch(async (e) => {
  console.error('web_list.js: ' + (e.stack || String(e)));
  await cleanup();
  process.exit(1);
});
