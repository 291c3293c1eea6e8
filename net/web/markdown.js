// markdown.js - the markdown of messages and thinking as DOM nodes, safely:
// nothing in the text is ever parsed as HTML. Every piece of text goes in
// as a text node; the only attribute taken from the text is a link's
// href, and only for http:, https: and mailto: URLs (anything else stays
// text). Images are shown as links, never loaded.
//
// The subset agents write: paragraphs (a single newline is a line break,
// as in chat), ATX headings, fenced and indented code, block quotes,
// lists (-, *, + and 1. or 1)), rules; inline `code`, **strong**, *em* and
// _em_, [text](url), ![alt](url), <url> and bare http(s) URLs, backslash
// escapes. Markdown.render(text) -> a DocumentFragment.
'use strict';

const Markdown = (() => {
  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
  const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/;
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}> ?/;
  const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])(\s+|$)/;
  const INDENTED = /^(?: {4}|\t)/;
  const BLANK = /^\s*$/;
  const MAX_DEPTH = 8; // quotes and lists inside each other: deeper is shown as text

  function node(tag, ...children) {
    const e = document.createElement(tag);
    for (const c of children) e.append(c);
    return e;
  }

  function safeUrl(url) {
    return /^(https?:\/\/|mailto:)/i.test(url) ? url : null;
  }

  function link(text, url) {
    const a = node('a');
    a.href = url;
    a.rel = 'noopener noreferrer nofollow';
    a.target = '_blank';
    if (typeof text === 'string') a.textContent = text;
    else a.append(text);
    return a;
  }

  // ---- inline ----------------------------------------------------------------

  const LINK = /!?\[([^\]\n]*)\]\(\s*<?([^\s()<>]+)>?(?:\s+"[^"\n]*")?\s*\)/y;
  const AUTO = /<((?:https?:\/\/|mailto:)[^\s<>]+)>/y;
  const BARE = /https?:\/\/[^\s<>]*[^\s<>.,:;"'!?)\]*_]/y;
  const ESCAPABLE = /[!-/:-@[-`{-~]/;

  // The closing delimiter of emphasis opened at i (length n), or -1.
  function closer(t, i, delim) {
    const n = delim.length;
    if (i + n >= t.length || /\s/.test(t[i + n])) return -1;
    for (let j = t.indexOf(delim, i + n + 1); j !== -1; j = t.indexOf(delim, j + 1)) {
      if (/\s/.test(t[j - 1])) continue;
      if (n === 1 && t[j + 1] === delim) { // part of a double: skip both
        j++;
        continue;
      }
      if (delim[0] === '_' && /[\p{L}\p{N}]/u.test(t[j + n] || '')) continue;
      return j;
    }
    return -1;
  }

  // Appends the inline nodes of t to out.
  function inline(t, out) {
    let buf = '';
    const flush = () => {
      if (buf) out.append(document.createTextNode(buf));
      buf = '';
    };
    let i = 0;
    while (i < t.length) {
      const c = t[i];
      if (c === '\\' && i + 1 < t.length && ESCAPABLE.test(t[i + 1])) {
        buf += t[i + 1];
        i += 2;
        continue;
      }
      if (c === '\n') {
        flush();
        out.append(node('br'));
        i++;
        continue;
      }
      if (c === '`') {
        let n = 1;
        while (t[i + n] === '`') n++;
        const ticks = '`'.repeat(n);
        let j = t.indexOf(ticks, i + n);
        while (j !== -1 && t[j + n] === '`') j = t.indexOf(ticks, j + n + 1);
        if (j === -1) {
          buf += ticks;
          i += n;
          continue;
        }
        let code = t.slice(i + n, j).replace(/\n/g, ' ');
        if (code.length > 2 && code[0] === ' ' && code[code.length - 1] === ' ') code = code.slice(1, -1);
        flush();
        const e = node('code');
        e.textContent = code;
        out.append(e);
        i = j + n;
        continue;
      }
      if (c === '*' || c === '_') {
        const dbl = t[i + 1] === c;
        const delim = dbl ? c + c : c;
        const leftOk = c === '*' || i === 0 || !/[\p{L}\p{N}]/u.test(t[i - 1]);
        const j = leftOk ? closer(t, i, delim) : -1;
        if (j !== -1) {
          flush();
          const e = node(dbl ? 'strong' : 'em');
          inline(t.slice(i + delim.length, j), e);
          out.append(e);
          i = j + delim.length;
          continue;
        }
        buf += delim;
        i += delim.length;
        continue;
      }
      if (c === '[' || (c === '!' && t[i + 1] === '[')) {
        LINK.lastIndex = i;
        const m = LINK.exec(t);
        const url = m && safeUrl(m[2]);
        if (m && url) {
          flush();
          if (c === '!') {
            out.append(link('[image: ' + (m[1] || url) + ']', url));
          } else {
            const label = document.createDocumentFragment();
            inline(m[1] || url, label);
            out.append(link(label, url));
          }
          i = LINK.lastIndex;
          continue;
        }
      }
      if (c === '<') {
        AUTO.lastIndex = i;
        const m = AUTO.exec(t);
        if (m) {
          flush();
          out.append(link(m[1], m[1]));
          i = AUTO.lastIndex;
          continue;
        }
      }
      if (c === 'h' && (i === 0 || !/[\p{L}\p{N}]/u.test(t[i - 1]))) {
        BARE.lastIndex = i;
        const m = BARE.exec(t);
        if (m) {
          flush();
          out.append(link(m[0], m[0]));
          i = BARE.lastIndex;
          continue;
        }
      }
      buf += c;
      i++;
    }
    flush();
  }

  // ---- blocks ----------------------------------------------------------------

  // Lines of a list item or quote, their own marker taken off.
  function blocks(lines, out, depth) {
    let i = 0;
    let para = [];
    const endPara = () => {
      if (!para.length) return;
      const p = node('p');
      inline(para.join('\n'), p);
      out.append(p);
      para = [];
    };
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (BLANK.test(line)) {
        endPara();
        i++;
      } else if ((m = FENCE.exec(line))) {
        endPara();
        const mark = m[1];
        const body = [];
        i++;
        while (i < lines.length && !(new RegExp('^ {0,3}' + mark[0] + '{' + mark.length + ',}\\s*$')).test(lines[i])) {
          body.push(lines[i++]);
        }
        i++; // the closing fence (or the end)
        const code = node('code');
        code.textContent = body.join('\n');
        if (m[2]) code.dataset.lang = m[2];
        out.append(node('pre', code));
      } else if (!para.length && INDENTED.test(line)) {
        const body = [];
        while (i < lines.length && (INDENTED.test(lines[i]) || BLANK.test(lines[i]))) {
          body.push(lines[i++].replace(INDENTED, ''));
        }
        while (body.length && BLANK.test(body[body.length - 1])) body.pop();
        const code = node('code');
        code.textContent = body.join('\n');
        out.append(node('pre', code));
      } else if ((m = HEADING.exec(line))) {
        endPara();
        const h = node('h' + Math.min(6, m[1].length + 2)); // h3..h6: under the page's own
        inline(m[2] || '', h);
        out.append(h);
        i++;
      } else if (RULE.test(line)) {
        endPara();
        out.append(node('hr'));
        i++;
      } else if (QUOTE.test(line) && depth < MAX_DEPTH) {
        endPara();
        const body = [];
        while (i < lines.length && QUOTE.test(lines[i])) body.push(lines[i++].replace(QUOTE, ''));
        const q = node('blockquote');
        blocks(body, q, depth + 1);
        out.append(q);
      } else if ((m = ITEM.exec(line)) && depth < MAX_DEPTH && (!para.length || !/\d/.test(m[2][0]) || m[2][0] === '1')) {
        endPara();
        i = list(lines, i, out, depth);
      } else {
        para.push(line.replace(/^ {0,3}/, ''));
        i++;
      }
    }
    endPara();
  }

  // A list from lines[i]; returns the index after it.
  function list(lines, i, out, depth) {
    const first = ITEM.exec(lines[i]);
    const ordered = /\d/.test(first[2][0]);
    const e = node(ordered ? 'ol' : 'ul');
    if (ordered && parseInt(first[2], 10) !== 1) e.start = parseInt(first[2], 10);
    while (i < lines.length) {
      const m = ITEM.exec(lines[i]);
      if (!m || /\d/.test(m[2][0]) !== ordered) break;
      const indent = m[0].length;
      const body = [lines[i].slice(indent)];
      i++;
      while (i < lines.length) {
        const l = lines[i];
        if (BLANK.test(l)) {
          // a blank line goes on in the item only if indented text follows
          if (i + 1 < lines.length && /^\s{2,}\S/.test(lines[i + 1])) {
            body.push('');
            i++;
            continue;
          }
          break;
        }
        if (/^\s{2,}\S/.test(l)) body.push(l.replace(new RegExp('^\\s{1,' + indent + '}'), ''));
        else if (ITEM.exec(l) || FENCE.test(l) || HEADING.test(l) || QUOTE.test(l)) break;
        else body.push(l); // a lazy continuation
        i++;
      }
      const li = node('li');
      blocks(body, li, depth + 1);
      if (li.children.length === 1 && li.firstChild.tagName === 'P') li.replaceChildren(...li.firstChild.childNodes);
      e.append(li);
      while (i < lines.length && BLANK.test(lines[i]) && i + 1 < lines.length && ITEM.test(lines[i + 1])) i++;
    }
    out.append(e);
    return i;
  }

  function render(text) {
    const f = document.createDocumentFragment();
    blocks(String(text).replace(/\r\n?/g, '\n').split('\n'), f, 0);
    return f;
  }

  return {render};
})();
