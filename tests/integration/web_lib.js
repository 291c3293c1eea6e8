// web_lib.js - what the browser tests share: a `parley serve` of their own
// (port 0: its first stdout line says where), REST calls to it, events as
// parley takes them, chromium launched through playwright-core (no browser
// download), pages that record console errors and dialogs, screenshots.
// Every wait has a deadline (T).
'use strict';
const path = require('path');
const fs = require('fs');
const http = require('http');
const readline = require('readline');
const {spawn} = require('child_process');
const {chromium} = require(path.join(__dirname, '..', 'node', 'node_modules', 'playwright-core'));

const T = 30000;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const servers = [];
let browser = null;

function check(cond, msg, ...details) {
  if (!cond) throw new Error(msg + (details.length ? ' | ' + JSON.stringify(details).slice(0, 800) : ''));
}

async function launch() {
  browser = await chromium.launch({executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'],
    timeout: T});
  return browser;
}

async function stopAll() {
  if (browser) await browser.close().catch(() => {});
  browser = null;
  await Promise.all(servers.splice(0).map((s) => s.stop()));
}

// Run main; on failure say why, stop everything and exit 1.
function main(name, fn) {
  fn().then(async () => {
    await stopAll();
    console.log(name + ': ok');
  }).catch(async (e) => {
    console.error('FAIL: ' + (e.stack || String(e)));
    await stopAll();
    process.exit(1);
  });
}

// A server on data dir tmp/NAME, on a port the OS chooses; or, port given,
// on that port: a stopped server started again (srv.restart()).
function serve(tmp, parley, name, extra, port = 0) {
  return new Promise((resolve, reject) => {
    const dir = path.join(tmp, name);
    const errPath = path.join(tmp, name + '.err');
    const err = fs.openSync(errPath, 'a');
    const child = spawn(parley, ['serve', '--data', dir, '--listen', '127.0.0.1:' + port,
      '--log-level', 'warn', ...extra], {stdio: ['ignore', 'pipe', err]});
    const exited = new Promise((r) => child.once('exit', (code, sig) => r({code, sig})));
    const srv = {
      restart: () => serve(tmp, parley, name, extra, srv.port),
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
      fs.readFileSync(errPath, 'utf8'))));
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

// method path [body] -> [status, parsed body]
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

// Events as parley takes them; the server stamps id-less ones' time.
const msg = (id, source, role, text) => ({id, source, kind: 'MessageEvent',
  llm_message: {role, content: [{type: 'text', text}]}});
const user = (id, text) => msg(id, 'user', 'user', text);
const agent = (id, text) => msg(id, 'agent', 'assistant', text);
const action = (id, call, cmd, resp) => ({id, source: 'agent', kind: 'ActionEvent',
  thought: [{type: 'text', text: 'running ' + cmd}], tool_name: 'terminal', tool_call_id: call,
  llm_response_id: resp,
  tool_call: {id: call, name: 'terminal', arguments: JSON.stringify({command: cmd}), origin: 'completion'},
  action: {kind: 'TerminalAction', command: cmd}});
const observation = (id, call, aid, out) => ({id, source: 'environment',
  kind: 'ObservationEvent', tool_name: 'terminal', tool_call_id: call, action_id: aid,
  observation: {kind: 'TerminalObservation', is_error: false, content: [{type: 'text', text: out}]}});

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

// The whole page, or (full false) what the window shows.
async function shot(page, dir, name, full = true) {
  await page.screenshot({path: path.join(dir, name + '.png'), fullPage: full});
}

module.exports = {T, check, launch, main, serve, api, user, agent, action, observation, openPage,
  shot};
