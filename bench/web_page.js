// web_page.js - the conversation page in a real browser (Debian's chromium,
// headless, driven by playwright-core from tests/node), against a real
// `parley serve` on 127.0.0.1:
//   - first render of a long conversation: from navigation to its last
//     block in the page (the page's own clock), on a fresh server (the visualizer starts and folds the
//     whole log: "cold") and again with the page reopened ("warm");
//   - append -> drawn: one agent message appended over REST, until its
//     block is in the page (MutationObserver: inserted) and painted (the
//     next animation frame after that), the page following live.
// Usage: node bench/web_page.js PARLEY [--events 100000] [--runs 3]
//        [--appends 200]
// Prints medians over --runs (a fresh server each), and p50/p99 of the
// appends. The events are those of bench/view_state.py (an agent's turn:
// a user message, a call, its result, a message; the same sizes).
'use strict';
const path = require('path');
const fs = require('fs');
const os = require('os');
const http = require('http');
const readline = require('readline');
const {spawn} = require('child_process');
const {performance} = require('perf_hooks');
const {chromium} = require(path.join(__dirname, '..', 'tests', 'node', 'node_modules', 'playwright-core'));

function usage(msg) {
  if (msg) console.error('web_page.js: ' + msg);
  console.error('usage: node bench/web_page.js PARLEY [--events N] [--runs N] [--appends N]');
  process.exit(2);
}

const args = process.argv.slice(2);
if (args.includes('--help') || args.includes('-h')) usage();
const parley = args[0];
if (!parley || !fs.existsSync(parley)) usage('the parley binary is the first argument');
const opt = {events: 100000, runs: 3, appends: 200};
for (let i = 1; i < args.length; i += 2) {
  const k = args[i].replace(/^--/, '');
  if (!(k in opt) || !/^\d+$/.test(args[i + 1] || '')) usage('bad option ' + args[i]);
  opt[k] = Number(args[i + 1]);
}
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const now = () => performance.timeOrigin + performance.now(); // ms, wall clock, as the page's

// bench/view_state.py's cycle, with a small deterministic generator.
function rng(seed) {
  let s = seed >>> 0;
  return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296;
}
function cycle(i, rnd) {
  let text = '';
  for (let k = 0; k < 64; k++) text += 'abcdefghij '[Math.floor(rnd() * 11)];
  const times = (a, b) => text.repeat(a + Math.floor(rnd() * (b - a + 1)));
  const n = Math.floor(i / 4);
  const id = 'e' + i;
  switch (i % 4) {
    case 0:
      return {id, source: 'user', kind: 'MessageEvent',
        llm_message: {role: 'user', content: [{type: 'text', text: times(6, 15)}]}};
    case 1:
      return {id, source: 'agent', kind: 'ActionEvent', thought: [{type: 'text', text: times(6, 18)}],
        tool_name: 'terminal', tool_call_id: 'c' + n, llm_response_id: 'r' + n,
        tool_call: {id: 'c' + n, name: 'terminal', arguments: '{}', origin: 'completion'},
        action: {kind: 'TerminalAction', command: 'ls /tmp/' + n}};
    case 2:
      return {id, source: 'environment', kind: 'ObservationEvent', tool_name: 'terminal',
        tool_call_id: 'c' + n, action_id: 'e' + (i - 1),
        observation: {kind: 'TerminalObservation', is_error: false,
          content: [{type: 'text', text: times(14, 60)}]}};
    default:
      return {id, source: 'agent', kind: 'MessageEvent',
        llm_message: {role: 'assistant', content: [{type: 'text', text: times(6, 30)}]}};
  }
}

function serve(data) {
  return new Promise((resolve, reject) => {
    const child = spawn(parley, ['serve', '--data', data, '--listen', '127.0.0.1:0', '--log-level', 'warn'],
      {stdio: ['ignore', 'pipe', 'inherit']});
    child.once('exit', (code) => reject(new Error('parley serve exited ' + code)));
    readline.createInterface({input: child.stdout}).once('line', (line) => {
      const m = /:(\d+)$/.exec(line);
      if (!m) return reject(new Error('unexpected first line: ' + line));
      resolve({child, port: Number(m[1]), base: 'http://127.0.0.1:' + m[1]});
    });
  });
}

async function stop(srv) {
  srv.child.removeAllListeners('exit');
  const done = new Promise((r) => srv.child.once('exit', r));
  srv.child.kill('SIGTERM');
  await done;
}

const agent = new http.Agent({keepAlive: true, maxSockets: 1});
function api(srv, method, p, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? null : JSON.stringify(body);
    const req = http.request({host: '127.0.0.1', port: srv.port, method, path: p, agent,
      headers: {'Content-Type': 'application/json'}}, (res) => {
      let raw = '';
      res.on('data', (c) => raw += c);
      res.on('end', () => (res.statusCode < 300 ? resolve(raw ? JSON.parse(raw) : null)
        : reject(new Error(`${method} ${p}: ${res.statusCode} ${raw.slice(0, 200)}`))));
    });
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}
function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(p / 100 * s.length) - 1)];
}

// From navigation to the block of the last event drawn, as the page's own
// clock says (performance.now() counts from the navigation's start): ms.
async function firstRender(browser, srv, cid, lastId) {
  const page = await browser.newPage({viewport: {width: 1280, height: 900}});
  await page.addInitScript((id) => {
    new MutationObserver((ms, o) => {
      if (document.querySelector(`[data-id="${id}"]`)) {
        window.drawnAt = performance.now();
        o.disconnect();
      }
    }).observe(document, {childList: true, subtree: true});
  }, lastId);
  await page.goto(`${srv.base}/conversations/${cid}`);
  await page.waitForFunction(() => window.drawnAt !== undefined, null, {timeout: 600000, polling: 50});
  const ms = await page.evaluate(() => window.drawnAt);
  if (process.env.WEB_BENCH_RAW) {
    console.log(JSON.stringify(await page.evaluate(() => performance.getEntries().map((e) =>
      [e.name.replace(location.origin, ''), Math.round(e.startTime), Math.round(e.duration)]))));
  }
  await page.close();
  return ms;
}

async function appendToDrawn(browser, srv, n) {
  const {id: cid} = await api(srv, 'POST', '/api/conversations', {});
  await api(srv, 'POST', `/api/conversations/${cid}/events/append`,
    [{id: 'u0', source: 'user', kind: 'MessageEvent', llm_message: {role: 'user', content: [{type: 'text', text: 'go'}]}}]);
  const page = await browser.newPage({viewport: {width: 1280, height: 900}});
  await page.goto(`${srv.base}/conversations/${cid}`);
  await page.locator('[data-id="u0"]').waitFor();
  await page.locator('#live.on').waitFor();
  await page.evaluate(() => {
    window.seen = {};
    new MutationObserver((ms) => {
      const t = performance.timeOrigin + performance.now();
      for (const m of ms) {
        for (const a of m.addedNodes) {
          const nodes = a.nodeType === 1 ? [a, ...a.querySelectorAll('[data-id]')] : [];
          for (const e of nodes) {
            if (e.dataset && e.dataset.id && !window.seen[e.dataset.id]) {
              const rec = window.seen[e.dataset.id] = {inserted: t};
              requestAnimationFrame(() => { rec.painted = performance.timeOrigin + performance.now(); });
            }
          }
        }
      }
    }).observe(document.getElementById('blocks'), {childList: true, subtree: true});
  });
  const inserted = [];
  const painted = [];
  const acked = [];
  for (let i = 0; i < n; i++) {
    const id = 'a' + i;
    const t0 = now();
    await api(srv, 'POST', `/api/conversations/${cid}/events/append`, [{id, source: i % 2 ? 'agent' : 'user',
      kind: 'MessageEvent', llm_message: {role: i % 2 ? 'assistant' : 'user', content: [{type: 'text', text: 'message ' + i}]}}]);
    acked.push(now() - t0);
    const rec = await page.waitForFunction((x) => window.seen[x] && window.seen[x].painted && window.seen[x],
      id, {polling: 'raf', timeout: 30000}).then((h) => h.jsonValue());
    inserted.push(rec.inserted - t0);
    painted.push(rec.painted - t0);
  }
  await page.close();
  return {inserted, painted, acked};
}

(async () => {
  const browser = await chromium.launch({executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new']});
  const cold = [];
  const warm = [];
  const data = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-web-bench.'));
  let srv = await serve(data);
  try {
    const {id: cid} = await api(srv, 'POST', '/api/conversations', {});
    const rnd = rng(7);
    process.stderr.write(`appending ${opt.events} events`);
    for (let b = 0; b < opt.events; b += 500) {
      const evs = [];
      for (let i = b; i < Math.min(b + 500, opt.events); i++) evs.push(cycle(i, rnd));
      await api(srv, 'POST', `/api/conversations/${cid}/events/append`, evs);
      if (b % 10000 === 0) process.stderr.write('.');
    }
    process.stderr.write('\n');
    const last = 'e' + (opt.events - 1);
    for (let r = 0; r < opt.runs; r++) {
      await stop(srv);
      srv = await serve(data); // a fresh server: the first /state folds the log
      cold.push(await firstRender(browser, srv, cid, last));
      warm.push(await firstRender(browser, srv, cid, last));
      console.error(`run ${r + 1}: cold ${cold[r].toFixed(0)} ms, warm ${warm[r].toFixed(0)} ms`);
    }
    const {inserted, painted, acked} = await appendToDrawn(browser, srv, opt.appends);
    console.log(`first render of a ${opt.events}-event conversation (median of ${opt.runs}): ` +
      `cold ${median(cold).toFixed(0)} ms, warm ${median(warm).toFixed(0)} ms`);
    console.log(`append -> drawn (${opt.appends} appends, one at a time): inserted p50 ${pct(inserted, 50).toFixed(1)} ms ` +
      `p99 ${pct(inserted, 99).toFixed(1)} ms; painted p50 ${pct(painted, 50).toFixed(1)} ms p99 ${pct(painted, 99).toFixed(1)} ms ` +
      `(the append's own answer, durable: p50 ${pct(acked, 50).toFixed(1)} ms p99 ${pct(acked, 99).toFixed(1)} ms)`);
    if (process.env.WEB_BENCH_RAW) console.log(JSON.stringify({inserted, painted, acked}));
  } finally {
    await browser.close();
    await stop(srv);
    fs.rmSync(data, {recursive: true, force: true});
  }
})().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
