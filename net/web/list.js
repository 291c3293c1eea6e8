// list.js - the page of conversations (GET /): a page of
// /api/conversations/search at a time, filtered by status, refreshed every
// few seconds, each row a link to the conversation's page. Newest first:
// sorted by creation, a page costs its own conversations only.
'use strict';

(() => {
  const {el, call, ago, showError} = Parley;
  const LIMIT = 50;
  const REFRESH_MS = 3000;
  const rows = document.getElementById('rows');
  const status = document.getElementById('status');
  const next = document.getElementById('next');
  const first = document.getElementById('first');
  const live = document.getElementById('live');
  let pages = [null]; // page_id of each page seen, for going back to the first
  let nextId = null;
  let timer = null;
  let seq = 0; // answers to older loads are dropped

  function agentName(a) {
    if (!a || typeof a !== 'object') return '';
    const cmd = Array.isArray(a.acp_command) ? a.acp_command.join(' ') : '';
    return [a.kind, cmd].filter(Boolean).join(': ');
  }

  function row(info, count) {
    const link = el('a', null, info.title || '(untitled)');
    link.href = '/conversations/' + encodeURIComponent(info.id);
    const when = el('td', 'when', ago(info.updated_at));
    when.title = info.updated_at || '';
    const st = info.execution_status || '';
    const tr = el('tr', 'conv',
      null,
      el('td', null, null, el('span', 'status status-' + st, st)),
      el('td', 'title', null, link),
      el('td', 'agent', agentName(info.agent)),
      el('td', 'count', count === null ? '' : count),
      when);
    tr.dataset.id = info.id;
    return tr;
  }

  async function count(id) {
    try {
      const n = await call('GET', `/api/conversations/${encodeURIComponent(id)}/events/count`);
      return typeof n === 'number' ? n : null;
    } catch (e) {
      return null;
    }
  }

  async function load() {
    clearTimeout(timer);
    const mine = ++seq;
    const q = new URLSearchParams({limit: String(LIMIT), sort_order: 'CREATED_AT_DESC'});
    if (status.value) q.set('status', status.value);
    const page = pages[pages.length - 1];
    if (page) q.set('page_id', page);
    try {
      const b = await call('GET', '/api/conversations/search?' + q);
      const items = (b && b.items) || [];
      const counts = await Promise.all(items.map((i) => count(i.id)));
      if (mine !== seq) return;
      rows.replaceChildren(...items.map((info, i) => row(info, counts[i])));
      document.getElementById('empty').hidden = items.length > 0;
      nextId = b.next_page_id || null;
      next.disabled = !nextId;
      first.disabled = pages.length === 1;
      live.textContent = 'updated ' + new Date().toLocaleTimeString();
      showError(null);
    } catch (e) {
      if (mine !== seq) return;
      showError(e);
      live.textContent = 'retrying…';
    }
    if (mine === seq) timer = setTimeout(load, REFRESH_MS);
  }

  status.addEventListener('change', () => {
    pages = [null];
    load();
  });
  next.addEventListener('click', () => {
    if (!nextId) return;
    pages.push(nextId);
    load();
  });
  first.addEventListener('click', () => {
    pages = [null];
    load();
  });
  load();
})();
