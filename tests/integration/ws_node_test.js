// ws_node_test.js - WebSocket streams against node's `ws` (npm, an
// independent client): auth (first frame, query and header keys, 4001),
// 4004, full_state first, replay all (resend_mode and resend_all), live
// events, resume by after_id (unknown: 1008), envelope=index, 1013 at the
// subscriber cap, 422/404 before the upgrade. Usage: node ws_node_test.js
// PORT API_KEY (the server runs with that key and --ws-max-subscribers 3).
// No sleeps: every wait is an event with a deadline.
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

// The HTTP status that refused an upgrade.
function refused(query, cid, headers) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => fail('no answer to the upgrade ' + query), T);
    const ws = new WebSocket(`ws://127.0.0.1:${port}/sockets/events/${cid}${query}`,
      headers ? {headers} : undefined);
    ws.on('unexpected-response', (req, res) => { clearTimeout(timer); resolve(res.statusCode);
      req.destroy(); });
    ws.on('open', () => fail('the upgrade ' + query + ' was accepted'));
    ws.on('error', () => {});
  });
}

// A socket whose frames and close are awaited in order.
function open(query, cid, auth) { return openWith(query, cid, undefined, auth); }
function openWith(query, cid, headers, auth) {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/sockets/events/${cid}${query}`, {headers});
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

  // on a second conversation (the cap is per conversation): the header key
  // with the deprecated resend_all=true, live only, an unknown after_id
  const [st2, conv2] = await call('POST', '/api/conversations', {stuck_detection: false});
  check(st2 === 201, 'create 2', st2, conv2);
  const cid2 = conv2.id;
  await call('POST', `/api/conversations/${cid2}/events/append`, [msg('x0'), msg('x1')]);
  const log2 = await log(cid2);
  const h = openWith('?resend_all=true', cid2, {'X-Session-API-Key': key});
  fullState(await h.next(), false);
  got = await h.take(log2.length);
  check(JSON.stringify(got) === JSON.stringify(log2), 'resend_all=true is not the log', got);
  const live = open('?envelope=index', cid2, AUTH);
  fullState(await live.next(), true);
  const [, ack] = await call('POST', `/api/conversations/${cid2}/events/append`, msg('x2'));
  for (const s of [h, live]) {
    const f = await s.next();
    const ev = f.event || f;
    check(ev.id === ack.events[0].id, 'the live event is the next frame', f);
    if (f.event) check(f.index === ack.events[0].index, 'live index', f);
  }
  await h.close();
  await open('?after_id=00000000-0000-4000-8000-00000000abcd', cid2, AUTH).closed(1008);
  // a wrong key with the upgrade: refused before it, as upstream
  check(await refused('?session_api_key=wrong', cid2) === 403, '403 query key');
  check(await refused('', cid2, {'X-Session-API-Key': 'wrong'}) === 403, '403 header key');
  // answers before the upgrade
  check(await refused(`?resend_mode=bogus&session_api_key=${key}`, cid2) === 422, '422 mode');
  check(await refused(`?after_id=${ack.events[0].id}&resend_mode=all`, cid2) === 422,
    '422 after_id with resend_mode');
  check(await refused('?envelope=json', cid2) === 422, '422 envelope');
  check(await refused('', 'not-a-uuid') === 404, '404 for a bad id');

  for (const s of [a, b, c, live]) await s.close();
  console.log('ws_node_test: ok');
  process.exit(0);
}

main().catch((e) => fail(e.stack || String(e)));
