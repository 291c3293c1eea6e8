// conversation.js - one conversation, live (GET /conversations/{id}): its
// blocks from GET .../state, then the view=blocks WebSocket, whose frames
// are applied as actors/view.h says:
//   {"index", "state"}                    the whole state
//   {"index", "subagent": entry}          an entry created or changed
//   {"index", "conversation", "upsert"}   a block replaced by id, or added last
//   {"index", "conversation", "removed"}  a block gone
// A frame's index is where to resume from, so a dropped socket reconnects
// with after_index = the last index applied (an upsert applied twice is
// applied once).
//
// Drawing: every block becomes DOM nodes built with textContent (never
// markup from an event); a tool call and its result share one row; long
// results and thinking start collapsed. Nodes are kept by block id and
// rebuilt only when their block changed.
'use strict';

(() => {
  const {el, call, askKey, key, showError} = Parley;
  const id = decodeURIComponent(location.pathname.split('/').filter(Boolean)[1] || '');
  const base = '/api/conversations/' + encodeURIComponent(id);
  const LONG_CHARS = 1200;
  const LONG_LINES = 16;
  const STATUS_MS = 3000;

  const view = document.getElementById('blocks');
  const live = document.getElementById('live');
  const statusEl = document.getElementById('status');
  let state = {blocks: [], subagents: []};
  let index = null; // the last event index applied (-1: none yet)
  let socket = null;
  let retryMs = 500;
  let drawPending = false;
  const opened = new Set(); // long results the reader opened, by block id
  const cache = new Map(); // key -> {json, node}

  // ---- the state -----------------------------------------------------------

  function blocksOf(conv) {
    if (conv === 'main') return state.blocks;
    const s = state.subagents.find((e) => e.toolUseId === conv) ||
      state.subagents.find((e) => e.agentId === conv);
    if (!s) return null;
    if (!s.blocks) s.blocks = [];
    return s.blocks;
  }

  function apply(f) {
    if ('state' in f) {
      state = {blocks: f.state.blocks || [], subagents: f.state.subagents || []};
    } else if ('subagent' in f) {
      const e = f.subagent;
      const have = state.subagents.find((s) => s.toolUseId === e.toolUseId);
      if (have) {
        const blocks = have.blocks || [];
        for (const k of Object.keys(have)) delete have[k];
        Object.assign(have, e, {blocks});
      } else {
        state.subagents.push(Object.assign({}, e, {blocks: []}));
      }
    } else if ('upsert' in f) {
      const list = blocksOf(f.conversation);
      if (list) {
        const b = f.upsert;
        const i = list.findIndex((x) => x.id === b.id);
        if (i >= 0) list[i] = b;
        else list.push(b);
      }
    } else if ('removed' in f) {
      const list = blocksOf(f.conversation);
      if (list) {
        const i = list.findIndex((x) => x.id === f.removed);
        if (i >= 0) list.splice(i, 1);
      }
    }
    index = f.index;
  }

  // ---- drawing -------------------------------------------------------------

  function text(v) {
    if (v === null || v === undefined) return '';
    if (typeof v === 'string') return v;
    if (Array.isArray(v)) {
      return v.map((p) => (p && p.type === 'text' ? p.text
        : p && p.type === 'image' ? '[image]' : JSON.stringify(p))).join('\n');
    }
    return JSON.stringify(v, null, 2);
  }

  // A <pre> of text; when long, cut short with a button to open it all.
  function longText(t, blockId) {
    const pre = el('pre', 'out', t);
    const lines = t.split('\n').length;
    if (t.length <= LONG_CHARS && lines <= LONG_LINES) return pre;
    const box = el('div', 'long' + (opened.has(blockId) ? ' open' : ''), null, pre);
    const btn = el('button', 'more', opened.has(blockId) ? 'Show less'
      : `Show all (${lines} lines, ${t.length} characters)`);
    btn.type = 'button';
    btn.addEventListener('click', () => {
      if (opened.has(blockId)) opened.delete(blockId);
      else opened.add(blockId);
      const open = opened.has(blockId);
      box.classList.toggle('open', open);
      btn.textContent = open ? 'Show less' : `Show all (${lines} lines, ${t.length} characters)`;
    });
    box.append(btn);
    return box;
  }

  function statusTag(b) {
    return b.status && b.status !== 'complete' ? el('span', 'tag tag-' + b.status, b.status) : null;
  }

  function head(kind, title, ...extra) {
    return el('div', 'head', null, el('span', 'kind', kind), title ? el('span', 'name', title) : null,
      ...extra);
  }

  function drawBlock(b) {
    const node = el('section', 'block b-' + String(b.type).replace(/[^a-z_]/g, ''));
    node.dataset.id = b.id;
    node.dataset.type = b.type;
    switch (b.type) {
      case 'user_message':
        node.append(head('User'), el('div', 'text', text(b.content)));
        break;
      case 'assistant_text':
        node.append(head('Agent', b.model), el('div', 'text', text(b.content)));
        break;
      case 'thinking': {
        const d = el('details', 'thinking', null,
          el('summary', null, b.summary ? 'Thinking: ' + b.summary : 'Thinking'),
          el('div', 'text', text(b.content)));
        node.append(d);
        break;
      }
      case 'tool_use': {
        const input = b.input && typeof b.input === 'object' && Object.keys(b.input).length
          ? JSON.stringify(b.input, null, 2) : text(b.input);
        node.append(head('Tool', b.displayName || b.toolName, statusTag(b)));
        if (b.description) node.append(el('div', 'desc', b.description));
        if (input) node.append(longText(input, b.id + ':input'));
        break;
      }
      case 'tool_result':
        if (b.isError) node.classList.add('is-error');
        node.append(head(b.isError ? 'Result (error)' : 'Result', null, statusTag(b)),
          longText(text(b.output), b.id));
        break;
      case 'system':
        if (b.subtype === 'error') node.classList.add('is-error');
        node.append(head('System', b.subtype), el('div', 'text', text(b.message)));
        break;
      case 'error':
        node.classList.add('is-error');
        node.append(head('Error', b.code), el('div', 'text', text(b.message)));
        break;
      case 'skill_load': {
        node.append(el('details', null, null, el('summary', null, 'Skill: ' + (b.skillName || '')),
          el('div', 'text', text(b.content))));
        break;
      }
      case 'subagent': {
        node.append(head('Subagent', b.name || b.description, statusTag(b)),
          el('div', 'text', text(b.input)));
        const inner = el('div', 'blocks nested');
        const sub = state.subagents.find((s) => s.toolUseId === b.toolUseId);
        if (sub) reconcile(inner, nodesFor(sub.blocks || [], 'sub:' + b.toolUseId + ':'));
        node.append(inner);
        if (b.output) node.append(head('Subagent result'), longText(text(b.output), b.id));
        break;
      }
      default:
        node.append(head(String(b.type)), longText(JSON.stringify(b, null, 2), b.id));
    }
    return node;
  }

  // A block's node, rebuilt only when the block (or, for a subagent, its
  // own blocks) changed.
  function nodeFor(b, prefix) {
    const k = prefix + b.id;
    let json = JSON.stringify(b);
    if (b.type === 'subagent') {
      const sub = state.subagents.find((s) => s.toolUseId === b.toolUseId);
      json += JSON.stringify(sub || null);
    }
    const have = cache.get(k);
    if (have && have.json === json) return have.node;
    const node = drawBlock(b);
    cache.set(k, {json, node});
    return node;
  }

  // The rows of a list of blocks: each call with its result beside it.
  function nodesFor(blocks, prefix) {
    const calls = new Set(blocks.filter((b) => b.type === 'tool_use').map((b) => b.toolUseId));
    const results = new Map();
    for (const b of blocks) if (b.type === 'tool_result' && calls.has(b.toolUseId)) results.set(b.toolUseId, b);
    const out = [];
    for (const b of blocks) {
      if (b.type === 'tool_result' && calls.has(b.toolUseId)) continue;
      if (b.type !== 'tool_use') {
        out.push(nodeFor(b, prefix));
        continue;
      }
      const pk = prefix + 'pair:' + b.id;
      let pair = cache.get(pk);
      if (!pair) {
        pair = {node: el('div', 'pair')};
        cache.set(pk, pair);
      }
      pair.node.dataset.call = b.toolUseId;
      const r = results.get(b.toolUseId);
      if (!pair.wait) pair.wait = el('section', 'block b-waiting', 'waiting for the result…');
      reconcile(pair.node, [nodeFor(b, prefix), r ? nodeFor(r, prefix) : pair.wait]);
      out.push(pair.node);
    }
    return out;
  }

  // Make parent's children exactly nodes, moving only what is out of place.
  function reconcile(parent, nodes) {
    for (let i = 0; i < nodes.length; i++) {
      if (parent.children[i] !== nodes[i]) parent.insertBefore(nodes[i], parent.children[i] || null);
    }
    while (parent.children.length > nodes.length) parent.lastElementChild.remove();
  }

  function draw() {
    drawPending = false;
    const atEnd = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
    reconcile(view, nodesFor(state.blocks, 'main:'));
    view.dataset.index = String(index);
    if (atEnd) window.scrollTo(0, document.body.scrollHeight);
  }

  function redraw() {
    if (drawPending) return;
    drawPending = true;
    setTimeout(draw, 0);
  }

  // ---- the API -------------------------------------------------------------

  function connect() {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const q = index !== null && index >= 0 ? '&after_index=' + index : '';
    const ws = new WebSocket(`${proto}//${location.host}/sockets/events/${encodeURIComponent(id)}?view=blocks${q}`);
    socket = ws;
    ws.addEventListener('open', () => {
      if (key()) ws.send(JSON.stringify({type: 'auth', session_api_key: key()}));
      live.textContent = 'live';
      live.classList.add('on');
      retryMs = 500;
    });
    ws.addEventListener('message', (m) => {
      let f;
      try {
        f = JSON.parse(m.data);
      } catch (e) {
        return;
      }
      if (f && typeof f.index === 'number') {
        apply(f);
        redraw();
      }
    });
    ws.addEventListener('close', async (c) => {
      if (socket !== ws) return;
      live.classList.remove('on');
      if (c.code === 4001) { // the key: ask, then again
        live.textContent = 'needs the API key';
        await askKey(key() !== '');
        connect();
        return;
      }
      if (c.code === 4004) {
        live.textContent = 'no such conversation';
        showError(new Error('Conversation not found: ' + id));
        return;
      }
      if (c.code === 1011) {
        live.textContent = 'not live';
        showError(new Error(c.reason || 'the server cannot show this conversation live'));
        return;
      }
      live.textContent = 'reconnecting…';
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
    });
  }

  async function refreshStatus() {
    try {
      const info = await call('GET', base);
      document.getElementById('title').textContent = info.title || '(untitled)';
      document.title = 'parley: ' + (info.title || id);
      statusEl.textContent = info.execution_status || '';
      statusEl.className = 'status status-' + (info.execution_status || '');
    } catch (e) {
      if (e.status === 404) showError(e);
    }
    setTimeout(refreshStatus, STATUS_MS);
  }

  async function start() {
    try {
      const s = await call('GET', base + '/state');
      if (index === null) apply({index: s.index, state: s});
      draw();
    } catch (e) {
      showError(e);
      if (e.status === 404) return;
    }
    connect();
    refreshStatus();
  }

  // ---- controls ------------------------------------------------------------

  async function act(btn, method, path, body) {
    btn.disabled = true;
    try {
      await call(method, path, body);
      showError(null);
    } catch (e) {
      showError(e);
    } finally {
      btn.disabled = false;
    }
  }

  document.getElementById('send').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const box = document.getElementById('text');
    const t = box.value.trim();
    if (!t) return;
    await act(document.getElementById('send-button'), 'POST', base + '/events',
      {role: 'user', content: [{type: 'text', text: t}], run: true});
    if (!document.getElementById('error').textContent) box.value = '';
  });
  document.getElementById('text').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      document.getElementById('send').requestSubmit();
    }
  });
  document.getElementById('run').addEventListener('click', (ev) => act(ev.target, 'POST', base + '/run'));
  document.getElementById('pause').addEventListener('click', (ev) => act(ev.target, 'POST', base + '/pause'));

  start();
})();
