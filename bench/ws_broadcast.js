// ws_broadcast.js - the fan-out a user would otherwise write: node's `ws`
// broadcasting each appended event to every socket of its conversation,
// with just enough of parley's API for `parley load` to drive it:
//   POST /api/conversations                       -> 201 {"id"}
//   POST /api/conversations/{id}/events/append    one event or an array ->
//        201 {"events": [{"id", "index"}]}, each sent as {"index": N, "event": ...}
//   GET  /api/conversations/{id}/events/search    ?page_id (inclusive) &limit ->
//        {"items", "next_page_id"}: the events kept in memory, for load's verdict
//   GET  /sockets/events/{id}                     WebSocket: {"event": full_state} first
// No durability, no backpressure (a slow socket buffers without bound).
// usage: node bench/ws_broadcast.js [PORT]   (prints "listening on http://127.0.0.1:PORT")
'use strict';
const http = require('http');
const crypto = require('crypto');
const path = require('path');
let WebSocket;
try { WebSocket = require('ws'); } catch (e) {
  WebSocket = require(path.join(__dirname, '../tests/node/node_modules/ws'));
}

const convs = new Map(); // id -> {events: [...], at: Map id -> index, subs: Set of sockets}
const wss = new WebSocket.WebSocketServer({noServer: true, perMessageDeflate: false});

function reply(res, status, obj) {
  const body = JSON.stringify(obj);
  res.writeHead(status, {'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body)});
  res.end(body);
}

function search(res, conv, q) {
  if (!conv) return reply(res, 404, {detail: 'no such conversation'});
  const limit = Number(q.get('limit') || 100);
  const from = q.has('page_id') ? conv.at.get(q.get('page_id')) : 0;
  if (!(limit >= 1 && limit <= 100) || from === undefined) return reply(res, 422, {detail: 'bad query'});
  const items = conv.events.slice(from, from + limit);
  const next = conv.events[from + limit];
  reply(res, 200, {items, next_page_id: next ? next.id : null});
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const u = new URL(req.url, 'http://x');
    const s = u.pathname.match(/^\/api\/conversations\/([0-9a-f-]+)\/events\/search$/);
    if (req.method === 'GET' && s) return search(res, convs.get(s[1]), u.searchParams);
    const m = req.url.match(/^\/api\/conversations(?:\/([0-9a-f-]+)\/events\/append)?$/);
    if (req.method !== 'POST' || !m) return reply(res, 404, {detail: 'no such route'});
    if (!m[1]) {
      const id = crypto.randomUUID();
      convs.set(id, {events: [], at: new Map(), subs: new Set()});
      return reply(res, 201, {id});
    }
    const conv = convs.get(m[1]);
    if (!conv) return reply(res, 404, {detail: 'no such conversation'});
    let body;
    try { body = JSON.parse(Buffer.concat(chunks)); } catch (e) {
      return reply(res, 422, {detail: 'bad JSON'});
    }
    const events = (Array.isArray(body) ? body : [body]).map((ev) => {
      ev.id = crypto.randomUUID();
      const index = conv.events.length;
      conv.events.push(ev);
      conv.at.set(ev.id, index);
      // serialized once, sent to every socket as the same buffer
      const frame = Buffer.from(`{"index":${index},"event":${JSON.stringify(ev)}}`);
      for (const ws of conv.subs) ws.send(frame, {binary: false});
      return {id: ev.id, index};
    });
    reply(res, 201, {events});
  });
});

server.on('upgrade', (req, socket, head) => {
  const m = req.url.match(/^\/sockets\/events\/([0-9a-f-]+)(\?.*)?$/);
  const conv = m && convs.get(m[1]);
  if (!conv) {
    socket.end('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n');
    return;
  }
  wss.handleUpgrade(req, socket, head, (ws) => {
    ws.send(JSON.stringify({event: {kind: 'ConversationStateUpdateEvent', key: 'full_state',
                                    value: {id: m[1], execution_status: 'idle'}}}));
    conv.subs.add(ws);
    ws.on('close', () => conv.subs.delete(ws));
    ws.on('error', () => conv.subs.delete(ws));
  });
});

server.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
