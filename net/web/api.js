// api.js - what both pages share: calls to the API with the key, the key
// prompt, and building DOM nodes from text.
//
// The key is asked for once (when the API first answers 401) and kept in
// sessionStorage: for this tab only, never in a URL. It goes out as
// X-Session-API-Key on REST and as the first WebSocket frame.
//
// Nothing here (or in the pages) ever sets innerHTML: what events say is
// put in the page with textContent, so markup in an event is shown as text.
'use strict';

const Parley = (() => {
  const STORE = 'parley.apiKey';
  let asking = null; // the pending prompt, shared by every call that hit 401

  function key() {
    return sessionStorage.getItem(STORE) || '';
  }

  // An element with a class and text (both optional), and children.
  function el(tag, cls, text, ...children) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null && text !== '') e.textContent = String(text);
    for (const c of children) if (c) e.append(c);
    return e;
  }

  // The key form, under the page's bar (made on first use).
  function keyForm() {
    let form = document.getElementById('key-form');
    if (form) return form;
    const input = el('input');
    Object.assign(input, {id: 'key-input', type: 'password', autocomplete: 'off', required: true});
    const why = el('label');
    why.id = 'key-why';
    why.htmlFor = 'key-input';
    const ok = el('button', null, 'Use key');
    ok.type = 'submit';
    form = el('form', 'key', null, why, input, ok);
    form.id = 'key-form';
    document.querySelector('.bar').after(form);
    return form;
  }

  // Show the key form; resolves once a key is entered.
  function askKey(wrong) {
    if (asking) return asking;
    const form = keyForm();
    const input = document.getElementById('key-input');
    document.getElementById('key-why').textContent = wrong
      ? 'That API key was refused; enter the server\'s key.'
      : 'This server needs its API key.';
    form.hidden = false;
    input.value = '';
    input.focus();
    asking = new Promise((resolve) => {
      form.addEventListener('submit', function done(ev) {
        ev.preventDefault();
        if (!input.value) return;
        sessionStorage.setItem(STORE, input.value);
        form.removeEventListener('submit', done);
        form.hidden = true;
        asking = null;
        resolve();
      });
    });
    return asking;
  }

  // A 401 to a request sent with key k: ask for a key, unless one was
  // entered since it was sent (another call's 401 asked, and this one's
  // answer came after): then it is only tried again. Asked again, the
  // prompt would hold this call, and with it the page, until a second
  // entry of the same key.
  async function refused(k) {
    if (key() === k) await askKey(k !== '');
  }

  class ApiError extends Error {
    constructor(status, detail) {
      super(`HTTP ${status}: ${detail}`);
      this.status = status;
    }
  }

  // method path [body] -> the parsed answer; asks for the key on a 401
  // and tries again with it.
  async function call(method, path, body) {
    for (;;) {
      const headers = {};
      const k = key();
      if (k) headers['X-Session-API-Key'] = k;
      const init = {method, headers};
      if (body !== undefined) {
        headers['Content-Type'] = 'application/json';
        init.body = JSON.stringify(body);
      }
      const res = await fetch(path, init);
      if (res.status === 401) {
        await refused(k);
        continue;
      }
      const text = await res.text();
      let data = null;
      try {
        data = text ? JSON.parse(text) : null;
      } catch (e) {
        data = text;
      }
      if (!res.ok) {
        const detail = data && typeof data === 'object' && data.detail ? data.detail : text;
        throw new ApiError(res.status, detail);
      }
      return data;
    }
  }

  // GET path -> the answer as text (/metrics is not JSON), with the key as
  // call sends it.
  async function callText(path) {
    for (;;) {
      const k = key();
      const res = await fetch(path, {headers: k ? {'X-Session-API-Key': k} : {}});
      if (res.status === 401) {
        await refused(k);
        continue;
      }
      const text = await res.text();
      if (!res.ok) throw new ApiError(res.status, text);
      return text;
    }
  }

  // "3 s ago", "5 min ago"...; the exact time goes in a title.
  function ago(iso) {
    const t = Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(iso) ? iso : iso + 'Z');
    if (!iso || Number.isNaN(t)) return '';
    const s = Math.max(0, Math.round((Date.now() - t) / 1000));
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.floor(s / 60) + ' min ago';
    if (s < 86400) return Math.floor(s / 3600) + ' h ago';
    return Math.floor(s / 86400) + ' d ago';
  }

  function showError(err) {
    const p = document.getElementById('error');
    if (!p) return;
    p.hidden = !err;
    p.textContent = err ? String(err.message || err) : '';
  }

  return {key, el, call, callText, refused, ago, showError};
})();
