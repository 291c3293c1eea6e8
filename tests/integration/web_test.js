// web_test.js - the web pages in a real browser: Debian's chromium, headless,
// driven by playwright-core (npm, tests/node; it downloads no browser).
// Starts its own `parley serve` (port 0, its first stdout line says where),
// without and then with --api-key, and checks what a person would see:
// the list shows the conversation; the conversation page shows its blocks
// in order, a tool call beside its result, a long result collapsed until
// opened, an event appended later without a reload, markup in an event as
// text (no dialog, no script element), a message sent from the box, a
// dropped socket resumed with after_index (the server stopped and started
// again on its port) ending where /state is; with
// a key, the key prompt, then the blocks. No console errors anywhere.
// Screenshots go to ARTIFACTS. Every wait is a condition with a deadline.
// Usage: node web_test.js PARLEY_BINARY TMP_DIR ARTIFACTS_DIR
'use strict';
const path = require('path');
const fs = require('fs');
const http = require('http');
const readline = require('readline');
const {spawn} = require('child_process');
const {chromium} = require(path.join(__dirname, '..', 'node', 'node_modules', 'playwright-core'));

const [parley, tmp, artifacts] = process.argv.slice(2);
const T = 30000;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const servers = [];
let browser = null;

async function stopAll() {
  if (browser) await browser.close().catch(() => {});
  browser = null;
  await Promise.all(servers.splice(0).map((s) => s.stop()));
}

async function fail(msg) {
  console.error('FAIL: ' + msg);
  await stopAll();
  process.exit(1);
}
function check(cond, msg, ...details) {
  if (!cond) throw new Error(msg + (details.length ? ' | ' + JSON.stringify(details).slice(0, 800) : ''));
}

// ---- a server --------------------------------------------------------------

// A server on data dir tmp/NAME; port: 0 (the OS chooses) or the port a
// stopped server of that name had, to start it again.
function serve(name, extra, port = 0) {
  return new Promise((resolve, reject) => {
    const dir = path.join(tmp, name);
    const err = fs.openSync(path.join(tmp, name + '.err'), 'a');
    const child = spawn(parley, ['serve', '--data', dir, '--listen', '127.0.0.1:' + port,
      '--log-level', 'warn', ...extra], {stdio: ['ignore', 'pipe', err]});
    const exited = new Promise((r) => child.once('exit', (code, sig) => r({code, sig})));
    const srv = {
      child,
      async stop() {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), T);
        const {code, sig} = await exited;
        clearTimeout(timer);
        if (code !== 0) console.error(`serve ${name} exited ${code} ${sig || ''}`);
      },
    };
    servers.push(srv);
    exited.then(() => servers.splice(servers.indexOf(srv) >>> 0, 1));
    const timer = setTimeout(() => reject(new Error(`serve ${name} printed nothing in ${T} ms`)), T);
    child.once('exit', (code) => reject(new Error(`serve ${name} exited ${code}: ` +
      fs.readFileSync(path.join(tmp, name + '.err'), 'utf8'))));
    readline.createInterface({input: child.stdout}).once('line', (line) => {
      clearTimeout(timer);
      const m = /^listening on http:\/\/127\.0\.0\.1:(\d+)$/.exec(line);
      if (!m) return reject(new Error('unexpected first line: ' + line));
      srv.port = Number(m[1]);
      srv.base = 'http://127.0.0.1:' + srv.port;
      resolve(srv);
    });
  });
}

function api(srv, key, method, p, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? null : JSON.stringify(body);
    const headers = {'Content-Type': 'application/json'};
    if (key) headers['X-Session-API-Key'] = key;
    const req = http.request({host: '127.0.0.1', port: srv.port, method, path: p, timeout: T, headers},
      (res) => {
        let raw = '';
        res.on('data', (c) => raw += c);
        res.on('end', () => resolve([res.statusCode, raw ? JSON.parse(raw) : null]));
      });
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

async function conversation(srv, key) {
  const [st, b] = await api(srv, key, 'POST', '/api/conversations', {});
  check(st === 201, 'POST /api/conversations', st, b);
  return b.id;
}

async function append(srv, key, cid, events) {
  const [st, b] = await api(srv, key, 'POST', `/api/conversations/${cid}/events/append`, events);
  check(st === 201, 'append', st, b);
}

// Events as parley takes them (tests/integration/view_test.py's helpers).
const TS = '2026-08-22T10:15:00.000001';
const user = (id, text) => ({id, timestamp: TS, source: 'user', kind: 'MessageEvent',
  llm_message: {role: 'user', content: [{type: 'text', text}]}});
const agent = (id, text) => ({id, timestamp: TS, source: 'agent', kind: 'MessageEvent',
  llm_message: {role: 'assistant', content: [{type: 'text', text}]}});
const action = (id, call, cmd, resp) => ({id, timestamp: TS, source: 'agent', kind: 'ActionEvent',
  thought: [{type: 'text', text: 'running ' + cmd}], tool_name: 'terminal', tool_call_id: call,
  llm_response_id: resp,
  tool_call: {id: call, name: 'terminal', arguments: JSON.stringify({command: cmd}), origin: 'completion'},
  action: {kind: 'TerminalAction', command: cmd}});
const observation = (id, call, aid, out) => ({id, timestamp: TS, source: 'environment',
  kind: 'ObservationEvent', tool_name: 'terminal', tool_call_id: call, action_id: aid,
  observation: {kind: 'TerminalObservation', is_error: false, content: [{type: 'text', text: out}]}});

// ---- a page ----------------------------------------------------------------

// A page that records console errors, page errors and dialogs.
async function openPage(context) {
  const page = await context.newPage();
  page.setDefaultTimeout(T);
  page.problems = [];
  page.dialogs = [];
  page.on('console', (m) => { if (m.type() === 'error') page.problems.push('console: ' + m.text()); });
  page.on('pageerror', (e) => page.problems.push('page error: ' + e.message));
  page.on('dialog', (d) => { page.dialogs.push(d.message()); d.dismiss().catch(() => {}); });
  return page;
}

// The blocks of the conversation page in reading order (a pair's call, then its result).
const order = (page) => page.$$eval('#blocks > *', (rows) => rows.flatMap((r) =>
  r.classList.contains('pair') ? [...r.children].map((c) => c.dataset.id) : [r.dataset.id]));

async function shot(page, name) {
  await page.screenshot({path: path.join(artifacts, name + '.png'), fullPage: true});
}

// ---- the tests -------------------------------------------------------------

// srv is stopped and started again on its port midway (a dropped socket).
async function withoutKey(srv) {
  const cid = await conversation(srv);
  await append(srv, null, cid, [user('u1', 'list the files'), action('a1', 'c1', 'ls', 'r1'),
    observation('o1', 'c1', 'a1', 'notes.md\nmain.c'), agent('m1', 'There are two files.')]);
  const [st] = await api(srv, null, 'PATCH', `/api/conversations/${cid}`, {title: 'Files please'});
  check(st === 200, 'PATCH title', st);

  const context = await browser.newContext();
  const page = await openPage(context);
  // the list
  await page.goto(srv.base + '/');
  const row = page.locator(`tr.conv[data-id="${cid}"]`);
  await row.waitFor();
  check(await row.locator('td.title a').textContent() === 'Files please', 'the title in the list');
  await page.waitForFunction((id) => {
    const c = document.querySelector(`tr.conv[data-id="${id}"] td.count`);
    return c && c.textContent === '4';
  }, cid);
  await shot(page, 'list');

  // to the conversation, by its link
  await row.locator('td.title a').click();
  await page.waitForURL('**/conversations/' + cid);
  await page.locator('[data-id="m1"]').waitFor();
  const want = ['u1', 'a1-thought', 'c1', 'result-c1', 'm1'];
  check(JSON.stringify(await order(page)) === JSON.stringify(want), 'the blocks in order',
    await order(page));
  const pair = page.locator('.pair[data-call="c1"]');
  check(await pair.locator('[data-id="c1"]').count() === 1 &&
    await pair.locator('[data-id="result-c1"]').count() === 1, 'the call beside its result');
  check((await pair.locator('[data-id="result-c1"] pre').textContent()).includes('main.c'),
    'the result\'s text');
  check((await page.locator('[data-id="u1"] .text').textContent()) === 'list the files', 'the user\'s text');
  await page.locator('#live.on').waitFor();
  await shot(page, 'conversation');

  // live: appended after the page was drawn, no reload
  await page.evaluate(() => { window.notReloaded = true; });
  const evil = '<script>alert(1)</script><img src=x onerror="alert(2)">';
  await append(srv, null, cid, [agent('m2', 'and one more thing'), agent('m3', evil)]);
  await page.locator('[data-id="m3"]').waitFor();
  check(await page.evaluate(() => window.notReloaded === true), 'no reload');
  check(await page.locator('[data-id="m2"] .text').textContent() === 'and one more thing', 'live text');
  check(await page.locator('[data-id="m3"] .text').textContent() === evil, 'markup shown as text');
  check(await page.locator('[data-id="m3"]').isVisible(), 'visible');
  check(await page.locator('#blocks script, #blocks img').count() === 0, 'no element from an event');

  // a long result starts collapsed and opens
  const long = Array.from({length: 80}, (_, i) => 'line ' + i).join('\n');
  await append(srv, null, cid, [action('a2', 'c2', 'seq 80', 'r2'), observation('o2', 'c2', 'a2', long)]);
  const res = page.locator('[data-id="result-c2"]');
  await res.locator('.long:not(.open)').waitFor();
  await res.locator('button.more').click();
  await res.locator('.long.open').waitFor();

  // the box sends a user message; it comes back as a block
  await page.fill('#text', 'typed in the page');
  await page.click('#send-button');
  await page.waitForFunction(() => [...document.querySelectorAll('.b-user_message .text')]
    .some((t) => t.textContent === 'typed in the page'));
  await page.waitForFunction(() => document.getElementById('text').value === ''); // once sent
  await page.click('#pause');
  await page.waitForFunction(() => document.getElementById('status').textContent === 'paused');
  await shot(page, 'conversation-live');

  // a dropped socket: the page reconnects with after_index and catches up
  // with what came while it was away; it then holds what /state says
  const port = srv.port;
  await srv.stop();
  await page.locator('#live:not(.on)').waitFor();
  srv = await serve('open', [], port);
  await append(srv, null, cid, [agent('m4', 'after the reconnect')]);
  await page.locator('[data-id="m4"]').waitFor();
  await page.locator('#live.on').waitFor();
  // what the browser logs of the outage itself is not the page's error
  page.problems = page.problems.filter((p) =>
    !/ERR_CONNECTION_REFUSED|WebSocket connection to .* failed/.test(p));
  const [sst, view] = await api(srv, null, 'GET', `/api/conversations/${cid}/state`);
  check(sst === 200, 'GET state', sst);
  check(JSON.stringify(await order(page)) === JSON.stringify(view.blocks.map((b) => b.id)),
    'the page holds what /state says', await order(page), view.blocks.map((b) => b.id));

  // dark and narrow
  await page.emulateMedia({colorScheme: 'dark'});
  await page.setViewportSize({width: 380, height: 800});
  await shot(page, 'conversation-dark-narrow');
  check(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1),
    'no sideways scrolling on a narrow window');

  // a reconnect resumes where it was: the page holds what /state says
  check(page.dialogs.length === 0, 'no dialog fired', page.dialogs);
  check(page.problems.length === 0, 'no console errors', page.problems);
  await context.close();
}

async function withKey(srv, key) {
  const cid = await conversation(srv, key);
  await append(srv, key, cid, [user('u1', 'behind a key')]);
  const [st] = await api(srv, null, 'GET', `/api/conversations/${cid}/state`);
  check(st === 401, 'the API wants the key', st);

  const context = await browser.newContext();
  const page = await openPage(context);
  await page.goto(`${srv.base}/conversations/${cid}`);
  await page.locator('#key-form').waitFor({state: 'visible'});
  await shot(page, 'key-prompt');
  await page.fill('#key-input', key);
  await page.click('#key-form button[type=submit]');
  await page.locator('[data-id="u1"]').waitFor();
  check(await page.locator('#key-form').isHidden(), 'the prompt goes away');
  // live through the WebSocket, authenticated by its first frame
  await page.locator('#live.on').waitFor();
  await append(srv, key, cid, [agent('m1', 'seen live')]);
  await page.locator('[data-id="m1"]').waitFor();
  check(!page.url().includes(key), 'the key is never in the URL', page.url());
  check(await page.evaluate(() => sessionStorage.getItem('parley.apiKey')) === key, 'kept for the tab');
  // the list, in the same tab: no second prompt
  await page.goto(srv.base + '/');
  await page.locator(`tr.conv[data-id="${cid}"]`).waitFor();
  check(await page.locator('#key-form').isHidden(), 'asked once');
  await shot(page, 'list-with-key');
  check(page.problems.every((p) => /401/.test(p)), 'no console errors but the 401s', page.problems);
  check(page.dialogs.length === 0, 'no dialog fired', page.dialogs);
  await context.close();
}

(async () => {
  fs.mkdirSync(artifacts, {recursive: true});
  browser = await chromium.launch({executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'],
    timeout: T});
  await withoutKey(await serve('open', []));
  await withKey(await serve('keyed', ['--api-key', 'webkey']), 'webkey');
  await stopAll();
  console.log('web: ok; screenshots in ' + artifacts);
})().catch((e) => fail(e.stack || String(e)));
