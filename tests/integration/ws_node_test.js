// ws_node_test.js - WebSocket streams against node's `ws` (npm, an
// independent client): auth (first frame, 4001), 4004, full_state first,
// replay all, live events, resume by after_id, envelope=index, 1013 at the
// subscriber cap. Usage: node ws_node_test.js PORT API_KEY (the server runs
// with that key and --ws-max-subscribers 3). No sleeps: every wait is an
// event with a deadline.
'use strict';
const path = require('path');
const http = require('http');
const WebSocket = require(path.join(__dirname, '..', 'node', 'node_modules', 'ws'));

const [port, key] = [Number(process.argv[2]), process.argv[3]];
const T = 60000;

function fail(msg) {
  console.error('FAIL: ' + msg);
  process.exit(1);
}
function check(cond, msg, ...details) {
  if (!cond) fail(msg + (details.length ? ' | ' + JSON.stringify(details).slice(0, 600) : ''));
}

function call(method, p, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? null : JSON.stringify(body);
    const req = http.request({host: '127.0.0.1', port, method, path: p, timeout: T,
      headers: {'Content-Type': 'application/json', 'X-Session-API-Key': key}}, (res) => {
      let raw = '';
      res.on('data', (c) => raw += c);
      res.on('end', () => resolve([res.statusCode, raw ? JSON.parse(raw) : null]));
    });
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

const msg = (text) => ({source: 'agent', kind: 'MessageEvent',
  llm_message: {role: 'assistant', content: [{type: 'text', text}]}});

async function log(cid) {
  let out = [], page = null;
  for (;;) {
    const [st, b] = await call('GET', `/api/conversations/${cid}/events/search?limit=100` +
      (page ? '&page_id=' + page : ''));
    check(st === 200, 'search', st, b);
    out = out.concat(b.items);
    if (!(page = b.next_page_id)) return out;
  }
}

// A socket whose frames and close are awaited in order.
function open(query, cid, auth) {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/sockets/events/${cid}${query}`);
  const frames = [], waiters = [];
  let closed = null;
  const wake = () => { while (waiters.length) waiters.shift()(); };
  ws.on('open', () => { if (auth !== undefined) ws.send(JSON.stringify(auth)); });
  ws.on('message', (d) => { frames.push(JSON.parse(d.toString())); wake(); });
  ws.on('close', (code, reason) => { closed = {code, reason: reason.toString()}; wake(); });
  ws.on('error', () => {});
  const until = (cond, what) => new Promise((resolve) => {
    const timer = setTimeout(() => fail('timed out waiting for ' + what), T);
    const test = () => {
      if (cond()) { clearTimeout(timer); resolve(); } else waiters.push(test);
    };
    test();
  });
  return {
    ws,
    next: async () => { await until(() => frames.length || closed, 'a frame');
      check(frames.length, 'closed instead of a frame', closed); return frames.shift(); },
    take: async (n) => { const out = [];
      for (let i = 0; i < n; i++) { await until(() => frames.length || closed, 'frame ' + i);
        check(frames.length, 'closed after ' + i + ' frames', closed); out.push(frames.shift()); }
      return out; },
    closed: async (code) => { await until(() => closed, 'a close ' + code);
      check(closed.code === code, `closed with ${closed.code} ${closed.reason}, wanted ${code}`); },
    close: () => new Promise((resolve) => { if (closed) resolve(); else { ws.on('close', resolve); ws.close(1000); } }),
  };
}

const AUTH = {type: 'auth', session_api_key: key};

function fullState(f, envelope) {
  if (envelope) { check(!('index' in f), 'full_state has no index', f); f = f.event; }
  check(f.kind === 'ConversationStateUpdateEvent' && f.key === 'full_state', 'not full_state', f);
  check(typeof f.value.execution_status === 'string', 'no status', f);
}

async function main() {
  const [st, conv] = await call('POST', '/api/conversations', {});
  check(st === 201, 'create', st, conv);
  const cid = conv.id;
  const [ast, first] = await call('POST', `/api/conversations/${cid}/events/append`,
    [0, 1, 2, 3, 4].map((i) => msg('e' + i)));
  check(ast === 201, 'append', ast, first);
  let events = await log(cid);

  // first-frame auth, replay all with envelopes, then live
  const a = open('?resend_mode=all&envelope=index', cid, AUTH);
  fullState(await a.next(), true);
  let got = await a.take(events.length);
  check(got.every((f, i) => f.index === i), 'replay indexes', got.map((f) => f.index));
  check(JSON.stringify(got.map((f) => f.event)) === JSON.stringify(events), 'replay is not the log');
  await call('POST', `/api/conversations/${cid}/events/append`, msg('live'));
  const n0 = events.length;
  events = await log(cid);
  got = await a.take(events.length - n0);
  check(got.every((f, i) => f.index === n0 + i), 'live indexes', got.map((f) => f.index));
  check(JSON.stringify(got.map((f) => f.event)) === JSON.stringify(events.slice(n0)), 'live events');

  // resume strictly after an event (the key in the query: the legacy form)
  const after = first.events[1].id;
  const k = events.findIndex((e) => e.id === after);
  const b = open(`?after_id=${after}&session_api_key=${key}`, cid);
  fullState(await b.next(), false);
  got = await b.take(events.length - k - 1);
  check(JSON.stringify(got.map((e) => e.id)) === JSON.stringify(events.slice(k + 1).map((e) => e.id)),
    'after_id', got.map((e) => e.id));

  // the cap is 3: a and b are two, c fills it, d is refused
  const c = open('', cid, AUTH);
  fullState(await c.next(), false);
  const d = open('', cid, AUTH);
  await d.closed(1013);

  // auth failures and an unknown conversation
  await open('', cid, {type: 'auth', session_api_key: 'wrong'}).closed(4001);
  await open('', cid, {role: 'user', content: []}).closed(4001);
  await open('', '00000000-0000-4000-8000-0000000000ff', AUTH).closed(4004);

  for (const s of [a, b, c]) await s.close();
  console.log('ws_node_test: ok');
  process.exit(0);
}

main().catch((e) => fail(e.stack || String(e)));
