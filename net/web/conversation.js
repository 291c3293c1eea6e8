// conversation.js - one conversation, live (GET /conversations/{id}).
//
// Blocks come a page at a time from GET .../state?from=K&limit=N, so a
// conversation of 100,000 events opens as fast as one of ten: only the
// pages near what is on screen are fetched and drawn (a virtualized list:
// pages off screen are spacers of their measured, or estimated, height).
// Changes come on the view=blocks WebSocket, resumed from the index of the
// first answer, frames applied as actors/view.h says:
//   {"index", "state"}                          the whole state
//   {"index", "subagent": entry}                an entry created or changed
//   {"index", "conversation", "at", "upsert"}   block number `at` is this
//   {"index", "conversation", "removed"}        a block gone (the ones after
//                                               it move up one)
// An upsert lands in its page if that page is held, is kept for a page on
// its way (and applied when it lands: the page may be older than the
// frame), and is dropped otherwise (the page, fetched later, has it). A
// removal makes every held page stale: they are fetched again (an idle
// removes only empty blocks, so this is rare). A dropped socket resumes
// from the last frame's index.
//
// Drawing: DOM nodes built with textContent, markdown through
// Markdown.render (markdown.js: never HTML from an event); a tool call and
// its result share one row; long results and thinking start collapsed;
// compliance violations, stuck findings and errors are marked where they
// happened. Nodes are kept per page by block and rebuilt only when their
// block changed.
'use strict';

(() => {
  const {el, call, refused, key, showError} = Parley;
  const id = decodeURIComponent(location.pathname.split('/').filter(Boolean)[1] || '');
  const base = '/api/conversations/' + encodeURIComponent(id);
  const PAGE = 100; // blocks per request
  const SUB_PAGES = 10; // a subagent shows its first 1,000 blocks
  const EST_PX = 90; // a block's height before any was measured
  const LONG_CHARS = 1200;
  const LONG_LINES = 16;
  const STATUS_MS = 5000;

  const view = document.getElementById('blocks');
  const live = document.getElementById('live');
  const statusEl = document.getElementById('status');
  const top = el('div', 'spacer');
  const bottom = el('div', 'spacer');
  view.append(top, bottom);

  let index = null; // the last event index applied (-1: none yet)
  let socket = null;
  let retryMs = 500;
  let renderPending = false;
  let following = true; // at the end: what comes is scrolled into view
  const opened = new Set(); // long texts the reader opened, by key

  // ---- the blocks held -------------------------------------------------------

  // The pages of one conversation ("main" or a subagent's toolUseId).
  class Pages {
    constructor(conv) {
      this.conv = conv;
      this.total = 0; // blocks it has, as far as we know
      this.pages = new Map(); // page -> its blocks, in order
      this.coming = new Map(); // page on its way -> [at, block] seen meanwhile
      this.gen = 0; // a drop makes answers on their way stale
      this.version = 0; // any change
    }

    count() {
      return Math.ceil(this.total / PAGE);
    }

    put(at, b) {
      if (!(at >= 0)) return;
      this.version++;
      if (at >= this.total) this.total = at + 1;
      const k = Math.floor(at / PAGE);
      const i = at % PAGE;
      const q = this.coming.get(k);
      if (q) q.push([at, b]);
      const p = this.pages.get(k);
      if (!p) return;
      if (i <= p.length) p[i] = b;
      else this.pages.delete(k); // a gap: fetch it again
    }

    fill(blocks) {
      this.drop();
      this.total = blocks.length;
      for (let k = 0; k * PAGE < blocks.length; k++) this.pages.set(k, blocks.slice(k * PAGE, (k + 1) * PAGE));
    }

    drop() {
      this.pages.clear();
      this.coming.clear();
      this.gen++;
      this.version++;
    }

    removed() {
      this.total = Math.max(0, this.total - 1);
      this.drop();
    }

    async fetch(k) {
      if (this.pages.has(k) || this.coming.has(k)) return;
      const gen = this.gen;
      this.coming.set(k, []);
      const q = new URLSearchParams({from: String(k * PAGE), limit: String(PAGE)});
      if (this.conv !== 'main') q.set('conversation', this.conv);
      try {
        const r = await call('GET', `${base}/state?${q}`);
        if (gen !== this.gen) return;
        const seen = this.coming.get(k) || [];
        this.coming.delete(k);
        this.pages.set(k, r.blocks || []);
        this.total = Math.max(this.total, r.total || 0);
        for (const [at, b] of seen) this.put(at, b);
        this.version++;
        render();
      } catch (e) {
        if (gen === this.gen) this.coming.delete(k);
        if (this.conv === 'main' || e.status !== 404) showError(e);
      }
    }
  }

  const main = new Pages('main');
  const subs = new Map(); // a subagent's toolUseId -> {pages}

  function sub(tool) {
    let s = subs.get(tool);
    if (!s) {
      s = {pages: new Pages(tool)};
      subs.set(tool, s);
    }
    return s;
  }

  function pagesOf(conv) {
    return conv === 'main' ? main : sub(conv).pages;
  }

  function apply(f) {
    if ('state' in f) {
      main.fill(f.state.blocks || []);
      subs.clear();
      for (const e of f.state.subagents || []) sub(e.toolUseId).pages.fill(e.blocks || []);
    } else if ('subagent' in f) {
      sub(f.subagent.toolUseId).pages.version++; // its block is drawn again
    } else if ('upsert' in f) {
      pagesOf(f.conversation).put(f.at, f.upsert);
      if (f.conversation === 'main') statusFrom(f.upsert, f.at);
    } else if ('removed' in f) {
      pagesOf(f.conversation).removed();
    }
    index = f.index;
  }

  // ---- drawing one block -----------------------------------------------------

  function text(v) {
    if (v === null || v === undefined) return '';
    if (typeof v === 'string') return v;
    if (Array.isArray(v)) {
      return v.map((p) => (p && p.type === 'text' ? p.text
        : p && p.type === 'image' ? '[image]' : JSON.stringify(p))).join('\n');
    }
    return JSON.stringify(v, null, 2);
  }

  function markdown(v) {
    const d = el('div', 'text md');
    d.append(Markdown.render(text(v)));
    return d;
  }

  // A <pre> of text; when long, cut short with a button to open it all.
  // Cut short, only its first lines are in the page: a long conversation's
  // screenful of results costs what is shown, not what they hold.
  function longText(t, k) {
    let lines = 1;
    for (let i = t.indexOf('\n'); i !== -1; i = t.indexOf('\n', i + 1)) lines++;
    if (t.length <= LONG_CHARS && lines <= LONG_LINES) return el('pre', 'out', t);
    let cut = 0;
    for (let n = 0; n < LONG_LINES && cut !== -1 && cut < LONG_CHARS; n++) cut = t.indexOf('\n', cut + 1);
    const head = t.slice(0, cut === -1 || cut > LONG_CHARS ? LONG_CHARS : cut);
    const pre = el('pre', 'out', opened.has(k) ? t : head);
    const label = () => (opened.has(k) ? 'Show less' : `Show all (${lines} lines, ${t.length} characters)`);
    const box = el('div', 'long' + (opened.has(k) ? ' open' : ''), null, pre);
    const btn = el('button', 'more', label());
    btn.type = 'button';
    btn.addEventListener('click', () => {
      if (opened.has(k)) opened.delete(k);
      else opened.add(k);
      pre.textContent = opened.has(k) ? t : head;
      box.classList.toggle('open', opened.has(k));
      btn.textContent = label();
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

  // An error block: parley's own findings are named for what they are.
  function drawError(b, node) {
    const meta = b.metadata || {};
    if (b.code === 'StuckPatternDetected') {
      node.classList.add('is-stuck');
      node.append(head('Stuck', meta.stuckRule || ''), el('div', 'text', text(b.message)));
    } else if (b.code === 'ComplianceViolation') {
      node.classList.add('is-violation');
      node.append(head('Violation', meta.gateRule || '', meta.policy ? el('span', 'tag', meta.policy) : null),
        el('div', 'text', text(b.message)));
    } else {
      node.classList.add('is-error');
      node.append(head('Error', b.code), el('div', 'text', text(b.message)));
    }
  }

  function drawBlock(b, cache) {
    const node = el('section', 'block b-' + String(b.type).replace(/[^a-z_]/g, ''));
    node.dataset.id = b.id;
    node.dataset.type = b.type;
    switch (b.type) {
      case 'user_message':
        node.append(head('User'), markdown(b.content));
        break;
      case 'assistant_text':
        node.append(head('Agent', b.model), markdown(b.content));
        break;
      case 'thinking':
        node.append(el('details', 'thinking', null,
          el('summary', null, b.summary ? 'Thinking: ' + b.summary : 'Thinking'), markdown(b.content)));
        break;
      case 'tool_use': {
        const input = b.input && typeof b.input === 'object' && Object.keys(b.input).length
          ? JSON.stringify(b.input, null, 2) : text(b.input);
        node.append(head('Tool', b.displayName || b.toolName, statusTag(b)));
        if (b.description && b.description !== (b.displayName || b.toolName)) node.append(el('div', 'desc', b.description));
        if (input) node.append(longText(input, b.id + ':input'));
        break;
      }
      case 'tool_result':
        if (b.isError) node.classList.add('is-error');
        node.append(head(b.isError ? 'Result (error)' : 'Result', null, statusTag(b)),
          longText(text(b.output), b.id));
        break;
      case 'system': {
        const st = b.metadata && b.metadata.executionStatus;
        if (b.subtype === 'error' || st === 'error') node.classList.add('is-error');
        if (st === 'stuck') node.classList.add('is-stuck');
        node.append(head('System', b.subtype), el('div', 'text', text(b.message)));
        break;
      }
      case 'error':
        drawError(b, node);
        break;
      case 'skill_load':
        node.append(el('details', null, null, el('summary', null, 'Skill: ' + (b.skillName || '')),
          el('div', 'text', text(b.content))));
        break;
      case 'subagent': {
        node.append(head('Subagent', b.name || b.description, statusTag(b)), el('div', 'text', text(b.input)));
        const s = sub(b.toolUseId);
        const inner = el('div', 'blocks nested');
        const blocks = [];
        const n = Math.min(s.pages.count() || 1, SUB_PAGES);
        for (let k = 0; k < n; k++) {
          const p = s.pages.pages.get(k);
          if (p) blocks.push(...p);
          else s.pages.fetch(k);
        }
        reconcile(inner, rows(blocks, cache, 'sub:' + b.toolUseId + ':', pairing(blocks)));
        node.append(inner);
        if (s.pages.total > SUB_PAGES * PAGE) {
          node.append(el('div', 'muted', `${s.pages.total - SUB_PAGES * PAGE} more blocks of this subagent not shown`));
        }
        if (b.output) node.append(head('Subagent result'), longText(text(b.output), b.id));
        break;
      }
      default:
        node.append(head(String(b.type)), longText(JSON.stringify(b, null, 2), b.id));
    }
    return node;
  }

  // A block's node from cache (a Map of key -> {b, extra, node}), rebuilt
  // only when the block changed (a frame brings a new object) or, for a
  // subagent, what it holds did.
  function nodeFor(b, cache, prefix) {
    const k = prefix + b.id;
    const extra = b.type === 'subagent' ? sub(b.toolUseId).pages.version : 0;
    const have = cache.get(k);
    if (have && have.b === b && have.extra === extra) return have.node;
    const node = drawBlock(b, cache);
    cache.set(k, {b, extra, node});
    return node;
  }

  // Which calls and results of a list of blocks are drawn together.
  function pairing(blocks) {
    const calls = new Set();
    const results = new Map();
    for (const b of blocks) {
      if (b.type === 'tool_use') calls.add(b.toolUseId);
      else if (b.type === 'tool_result') results.set(b.toolUseId, b);
    }
    return {
      resultOf: (b) => (calls.has(b.toolUseId) ? results.get(b.toolUseId) : undefined),
      withCall: (r) => calls.has(r.toolUseId),
    };
  }

  // The rows of blocks: each call with its result beside it, the rest alone.
  function rows(blocks, cache, prefix, pair) {
    const out = [];
    for (const b of blocks) {
      if (b.type === 'tool_result' && pair.withCall(b)) continue;
      if (b.type !== 'tool_use') {
        out.push(nodeFor(b, cache, prefix));
        continue;
      }
      const pk = prefix + 'pair:' + b.id;
      let p = cache.get(pk);
      if (!p) {
        p = {node: el('div', 'pair'), wait: el('section', 'block b-waiting', 'waiting for the result…')};
        cache.set(pk, p);
      }
      p.node.dataset.call = b.toolUseId;
      const r = pair.resultOf(b);
      const cells = [nodeFor(b, cache, prefix)];
      if (r) cells.push(nodeFor(r, cache, prefix));
      else if (b.status === 'pending') cells.push(p.wait);
      p.node.classList.toggle('alone', cells.length === 1);
      reconcile(p.node, cells);
      out.push(p.node);
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

  // ---- the virtualized list --------------------------------------------------

  const chunks = new Map(); // page on screen -> {node, cache}
  const measured = new Map(); // page -> [px, blocks] when last drawn

  function estimate() {
    let px = 0;
    let n = 0;
    for (const [h, c] of measured.values()) {
      px += h;
      n += c;
    }
    return n ? px / n : EST_PX;
  }

  function height(k, avg) {
    const n = Math.min(PAGE, main.total - k * PAGE);
    const m = measured.get(k);
    if (m && m[1] === n) return m[0];
    return m && m[1] > 0 ? m[0] / m[1] * n : n * avg;
  }

  // The pages to draw: those within a screen of what is shown.
  function windowOf(n, avg) {
    const vh = window.innerHeight;
    if (following) {
      let first = n;
      for (let acc = 0; first > 0 && acc < 2 * vh;) acc += height(--first, avg);
      return [first, n - 1];
    }
    const y = window.scrollY - (view.getBoundingClientRect().top + window.scrollY);
    let first = 0;
    let acc = 0;
    while (first < n - 1 && acc + height(first, avg) < y - vh) acc += height(first++, avg);
    let last = first;
    for (acc += height(first, avg); last < n - 1 && acc < y + 2 * vh;) acc += height(++last, avg);
    return [first, last];
  }

  function draw() {
    renderPending = false;
    const n = main.count();
    const avg = estimate();
    const [first, last] = n ? windowOf(n, avg) : [0, -1];
    // pairs across a page's edge: calls and results of every page drawn
    const shown = [];
    for (let k = first; k <= last; k++) if (main.pages.has(k)) shown.push(...main.pages.get(k));
    const pair = pairing(shown);
    const nodes = [top];
    for (let k = first; k <= last; k++) {
      let c = chunks.get(k);
      if (!c) {
        c = {node: el('div', 'chunk'), cache: new Map()};
        c.node.dataset.page = String(k);
        chunks.set(k, c);
      }
      const p = main.pages.get(k);
      if (p) {
        c.node.style.height = '';
        c.node.classList.remove('loading');
        reconcile(c.node, rows(p, c.cache, 'main:', pair));
      } else {
        c.node.classList.add('loading');
        c.node.style.height = height(k, avg) + 'px';
        c.node.replaceChildren();
        main.fetch(k);
      }
      nodes.push(c.node);
    }
    for (const k of chunks.keys()) if (k < first || k > last) chunks.delete(k);
    nodes.push(bottom);
    reconcile(view, nodes);
    for (let k = first; k <= last; k++) {
      const p = main.pages.get(k);
      if (p) measured.set(k, [chunks.get(k).node.offsetHeight, p.length]);
    }
    let above = 0;
    let below = 0;
    for (let k = 0; k < first; k++) above += height(k, avg);
    for (let k = last + 1; k < n; k++) below += height(k, avg);
    top.style.height = above + 'px';
    bottom.style.height = below + 'px';
    view.dataset.index = String(index);
    view.dataset.total = String(main.total);
    if (following) window.scrollTo(0, document.documentElement.scrollHeight);
  }

  function render() {
    if (renderPending) return;
    renderPending = true;
    requestAnimationFrame(draw);
  }

  function atEnd() {
    return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 40;
  }

  window.addEventListener('scroll', () => {
    following = atEnd();
    render();
  }, {passive: true});
  window.addEventListener('resize', render);

  // ---- the API ---------------------------------------------------------------

  function connect() {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const q = index !== null && index >= 0 ? '&after_index=' + index : '';
    const ws = new WebSocket(`${proto}//${location.host}/sockets/events/${encodeURIComponent(id)}?view=blocks${q}`);
    socket = ws;
    let sent = ''; // the key this socket went with
    ws.addEventListener('open', () => {
      sent = key();
      if (sent) ws.send(JSON.stringify({type: 'auth', session_api_key: sent}));
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
        render();
      }
    });
    ws.addEventListener('close', async (c) => {
      if (socket !== ws) return;
      live.classList.remove('on');
      if (c.code === 4001) { // the key: ask, then again
        live.textContent = 'needs the API key';
        await refused(sent);
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

  // The first page's answer says where the live stream starts.
  function begin(at) {
    index = at;
    connect();
  }

  function showStatus(st) {
    statusEl.textContent = st || '';
    statusEl.className = 'status status-' + (st || '');
    document.body.dataset.status = st || '';
  }

  // A status block that comes live says the status at once, if it is the
  // latest one: an idle also completes the earlier, pending ones, and
  // those upserts come after.
  let statusAt = -1;
  function statusFrom(b, at) {
    const st = b && b.type === 'system' && b.metadata && b.metadata.executionStatus;
    if (st && at >= statusAt) {
      statusAt = at;
      showStatus(st);
    }
  }

  async function refreshStatus() {
    try {
      const info = await call('GET', base);
      document.getElementById('title').textContent = info.title || '(untitled)';
      document.title = 'parley: ' + (info.title || id);
      showStatus(info.execution_status);
    } catch (e) {
      if (e.status === 404) showError(e);
    }
    setTimeout(refreshStatus, STATUS_MS);
  }

  async function start() {
    // the last page first: where a reader of a live conversation looks
    try {
      const r = await call('GET', `${base}/state?from=0&limit=1`);
      main.total = r.total || 0;
      if (main.total <= 1) main.fill(r.blocks || []);
      begin(r.index);
      render();
    } catch (e) {
      showError(e);
      if (e.status === 404) return;
      setTimeout(start, 2000);
      return;
    }
    refreshStatus();
  }

  // ---- controls --------------------------------------------------------------

  async function act(btn, method, path, body) {
    btn.disabled = true;
    try {
      await call(method, path, body);
      showError(null);
      return true;
    } catch (e) {
      showError(e);
      return false;
    } finally {
      btn.disabled = false;
    }
  }

  document.getElementById('send').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const box = document.getElementById('text');
    const t = box.value.trim();
    if (!t) return;
    if (await act(document.getElementById('send-button'), 'POST', base + '/events',
      {role: 'user', content: [{type: 'text', text: t}], run: true})) box.value = '';
  });
  document.getElementById('text').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      document.getElementById('send').requestSubmit();
    }
  });
  const button = (name, f) => document.getElementById(name).addEventListener('click', (ev) => f(ev.currentTarget));
  button('run', (b) => act(b, 'POST', base + '/run'));
  button('pause', (b) => act(b, 'POST', base + '/pause'));
  button('interrupt', (b) => act(b, 'POST', base + '/interrupt'));
  button('confirm', (b) => act(b, 'POST', base + '/events/respond_to_confirmation', {accept: true}));
  button('reject', (b) => act(b, 'POST', base + '/events/respond_to_confirmation',
    {accept: false, reason: 'Rejected in the web page.'}));

  start();
})();
