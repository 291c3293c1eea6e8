// list.js - the page of conversations (GET /).
//
// Each refresh (every 2 s while the tab is visible; none while it is
// hidden) is two requests whatever the page holds: a page of
// /api/conversations/search, whose ConversationInfo carries parley's
// event_count, violations and stuck_findings, and the total from
// /api/conversations/count. Sorting (sort_order) and the status filter are
// the API's; pages are its cursors (next_page_id), kept in a stack for
// going back, so the page costs the same with 100 or 100 000
// conversations. The filter and the order are in the URL (a reload keeps
// them); the key never is.
//
// Rows are kept by conversation id and changed in place, cell by cell,
// only where the text changed: a refresh neither flickers nor takes the
// focus away, and a row moves only when the order changed.
//
// Above the list, the server's own figures (/metrics, Prometheus text),
// sampled each second: events made durable per second, and open
// connections (HTTP connections plus WebSocket streams), the last two
// minutes.
'use strict';

(() => {
  const {el, call, callText, ago, showError} = Parley;
  const LIMIT = 50;
  const REFRESH_MS = 2000;
  const SAMPLE_MS = 1000;
  const SAMPLES = 120;
  const SORTS = ['CREATED_AT_DESC', 'CREATED_AT', 'UPDATED_AT_DESC', 'UPDATED_AT'];
  const $ = (id) => document.getElementById(id);
  const rows = $('rows');
  const status = $('status');
  const sort = $('sort');
  const live = $('live');
  const [first, prev, next, where] = ['first', 'prev', 'next', 'where'].map($);
  let pages = [null]; // the cursor of each page up to this one (null: the first)
  let nextId = null;
  const byId = new Map(); // conversation id -> {tr, cells}

  // ---- helpers -------------------------------------------------------------

  // Run fn now and again ms after it settles, while the tab is visible.
  // fn gets a function saying whether its run is still the latest (a
  // later run, or the tab hidden, makes its answer stale). The result runs
  // it again at once (after a change of page, order or filter).
  function every(ms, fn) {
    let timer = null;
    let gen = 0;
    async function tick() {
      clearTimeout(timer);
      timer = null;
      const mine = ++gen;
      await fn(() => mine === gen);
      if (mine === gen && !document.hidden) timer = setTimeout(tick, ms);
    }
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden) return tick();
      clearTimeout(timer);
      timer = null;
      gen++;
    });
    return tick;
  }

  // A node's text, class and title, each set only if given and changed.
  function put(node, text, cls, title) {
    const t = text === null ? '' : String(text);
    if (text !== undefined && node.textContent !== t) node.textContent = t;
    if (cls !== undefined && node.className !== cls) node.className = cls;
    if (title !== undefined && node.title !== title) node.title = title;
  }

  function agentName(a) {
    if (!a || typeof a !== 'object') return '';
    const cmd = Array.isArray(a.acp_command) ? a.acp_command.join(' ') : '';
    return [a.kind, cmd].filter(Boolean).join(': ');
  }

  const count = (n) => (Number.isInteger(n) && n >= 0 ? n : 0);
  const perSecond = (r) => (r < 10 ? r.toFixed(1) : String(Math.round(r)));

  // ---- rows ----------------------------------------------------------------

  function makeRow(id) {
    const td = (cls, label, ...kids) => {
      const c = el('td', cls, null, ...kids);
      c.dataset.label = label;
      return c;
    };
    const cells = {
      status: el('span', 'status'),
      link: el('a'),
      agent: td('agent', 'agent'),
      count: td('count num', 'events'),
      violations: el('span', 'n'),
      stuck: el('span', 'n'),
      when: td('when', 'last activity'),
      created: td('created', 'created'),
    };
    cells.link.href = '/conversations/' + encodeURIComponent(id);
    cells.vcell = td('violations num', 'violations', cells.violations);
    cells.scell = td('stuck num', 'stuck', cells.stuck);
    const tr = el('tr', 'conv', null, td('st', 'status', cells.status),
      td('title', 'title', cells.link), cells.agent, cells.count, cells.vcell, cells.scell,
      cells.when, cells.created);
    tr.dataset.id = id;
    return {tr, cells};
  }

  function update(r, info) {
    const c = r.cells;
    const st = info.execution_status || '';
    const v = count(info.violations);
    const s = count(info.stuck_findings);
    put(c.status, st.replace(/_/g, ' '), 'status status-' + st);
    put(c.link, info.title || '(untitled)');
    put(c.agent, agentName(info.agent));
    put(c.count, count(info.event_count));
    put(c.violations, v, 'n', v ? `${v} compliance violation${v > 1 ? 's' : ''} recorded` : '');
    put(c.stuck, s, 'n', s ? `found stuck ${s} time${s > 1 ? 's' : ''}` : '');
    put(c.vcell, undefined, v ? 'violations num flag flag-bad' : 'violations num');
    put(c.scell, undefined, s ? 'stuck num flag flag-warn' : 'stuck num');
    put(c.when, ago(info.updated_at), undefined, info.updated_at || '');
    put(c.created, ago(info.created_at), undefined, info.created_at || '');
    const cls = 'conv' + (v ? ' has-violations' : '') + (s ? ' has-stuck' : '');
    if (r.tr.className !== cls) r.tr.className = cls;
  }

  // The page's rows in the order of items: a row that stays is kept (and
  // moved only if its place changed), the others go.
  function render(items) {
    const seen = new Set();
    let at = rows.firstChild;
    for (const info of items) {
      if (!info || typeof info.id !== 'string' || seen.has(info.id)) continue;
      seen.add(info.id);
      let r = byId.get(info.id);
      if (!r) byId.set(info.id, (r = makeRow(info.id)));
      update(r, info);
      if (r.tr === at) at = at.nextSibling;
      else rows.insertBefore(r.tr, at);
    }
    while (at) {
      const gone = at;
      at = at.nextSibling;
      gone.remove();
    }
    for (const id of byId.keys()) if (!seen.has(id)) byId.delete(id);
    $('empty').hidden = seen.size > 0;
  }

  // ---- the list ------------------------------------------------------------

  function pager(shown, total) {
    const n = pages.length;
    const from = (n - 1) * LIMIT;
    const all = Number.isInteger(total) ? total : null;
    const of = all === null ? '' : ` of ${all}`;
    const npages = all === null ? '' : ` of ${Math.max(1, Math.ceil(all / LIMIT))}`;
    put(where, shown ? `${from + 1}–${from + shown}${of} · page ${n}${npages}`
      : `none${of} · page ${n}${npages}`);
    next.disabled = !nextId;
    prev.disabled = n === 1;
    first.disabled = n === 1;
  }

  async function load(current) {
    const q = new URLSearchParams({limit: String(LIMIT), sort_order: sort.value});
    const cq = new URLSearchParams();
    if (status.value) {
      q.set('status', status.value);
      cq.set('status', status.value);
    }
    const page = pages[pages.length - 1];
    if (page) q.set('page_id', page);
    try {
      const [b, total] = await Promise.all([
        call('GET', '/api/conversations/search?' + q),
        call('GET', '/api/conversations/count' + (status.value ? '?' + cq : '')),
      ]);
      if (!current()) return;
      const items = b && Array.isArray(b.items) ? b.items : [];
      render(items);
      nextId = (b && b.next_page_id) || null;
      pager(items.length, total);
      put(live, 'updated ' + new Date().toLocaleTimeString(), 'live muted on');
      showError(null);
    } catch (e) {
      if (!current()) return;
      showError(e);
      put(live, 'retrying…', 'live muted');
    }
  }
  const refresh = every(REFRESH_MS, load);

  // ---- order, filter, pages ------------------------------------------------

  function showSort() {
    for (const b of document.querySelectorAll('button.sort')) {
      const on = sort.value === b.dataset.key || sort.value === b.dataset.key + '_DESC';
      const desc = sort.value.endsWith('_DESC');
      b.parentElement.setAttribute('aria-sort', on ? (desc ? 'descending' : 'ascending') : 'none');
    }
  }

  // A new order or filter: from the first page, and said in the URL.
  function restart() {
    pages = [null];
    nextId = null;
    const u = new URLSearchParams();
    if (status.value) u.set('status', status.value);
    if (sort.value !== SORTS[0]) u.set('sort', sort.value);
    history.replaceState(null, '', u.toString() ? '?' + u : location.pathname);
    showSort();
    refresh();
  }

  const from = new URLSearchParams(location.search);
  if ([...status.options].some((o) => o.value === from.get('status'))) status.value = from.get('status');
  if (SORTS.includes(from.get('sort'))) sort.value = from.get('sort');
  showSort();

  status.addEventListener('change', restart);
  sort.addEventListener('change', restart);
  for (const b of document.querySelectorAll('button.sort')) {
    b.addEventListener('click', () => {
      // the same column flips its direction; another starts newest first
      sort.value = sort.value === b.dataset.key + '_DESC' ? b.dataset.key : b.dataset.key + '_DESC';
      restart();
    });
  }
  next.addEventListener('click', () => {
    if (!nextId) return;
    pages.push(nextId);
    refresh();
  });
  prev.addEventListener('click', () => {
    if (pages.length > 1) pages.pop();
    refresh();
  });
  first.addEventListener('click', () => {
    pages = [null];
    refresh();
  });

  // ---- the server's figures ------------------------------------------------

  const charts = {
    events: ParleyChart.create($('chart-events'), SAMPLES, 'events'),
    conns: ParleyChart.create($('chart-conns'), SAMPLES, 'conns'),
  };
  let last = null; // the previous sample of the appended counter: {t, n}

  // The unlabelled samples of a Prometheus text: {name: value}.
  function figures(text) {
    const m = {};
    for (const line of String(text).split('\n')) {
      const r = /^([a-zA-Z_:][a-zA-Z0-9_:]*) (\S+)$/.exec(line);
      if (r) m[r[1]] = Number(r[2]);
    }
    return m;
  }

  async function sample(current) {
    let m;
    try {
      m = figures(await callText('/metrics'));
    } catch (e) {
      last = null; // the list says what is wrong; the chart waits
      return;
    }
    if (!current()) return;
    const t = performance.now();
    const n = m.parley_events_appended_total;
    if (Number.isFinite(n)) {
      // the first sample, or a server that started again, is a new start
      if (last && n >= last.n && t > last.t) {
        const rate = (n - last.n) / ((t - last.t) / 1000);
        charts.events.push(rate);
        put($('now-events'), perSecond(rate));
        put($('peak-events'), 'peak ' + perSecond(charts.events.peak()));
      }
      last = {t, n};
    }
    const http = count(m.parley_http_connections);
    const ws = count(m.parley_ws_streams);
    charts.conns.push(http + ws);
    put($('now-conns'), http + ws);
    put($('conns-split'), `(${http} HTTP, ${ws} WebSocket)`);
  }
  const sampling = every(SAMPLE_MS, sample);

  refresh();
  sampling();
})();
