// web_test.js - the web pages in a real browser: Debian's chromium, headless,
// driven by playwright-core (npm, tests/node; it downloads no browser),
// against `parley serve`s of its own (web_lib.js), and what a person would
// see there:
// - markdown drawn as elements, and nothing from an event run: markup and
//   javascript: links shown as text; a subagent's call as its block;
// - hosted scripted agents (tests/node/acp_agent.mjs) driven from the
//   page's box: thinking folded, calls beside their results, a confirmation
//   confirmed and one rejected with the buttons, a stuck agent and a rule
//   broken under observe marked where it happened;
// - a 3,000-block conversation: opened at its end with only pages near the
//   screen drawn, scrolled to its start and middle, an event appended while
//   the reader is elsewhere counted without moving them;
// - the list showing a conversation, and its page: blocks in order, a call
//   beside its result, a long result collapsed until opened, events
//   appended later without a reload, an empty message an idle removes, a
//   message and a pause from the page, a dropped socket resumed with
//   after_index (the server stopped and started again on its port) ending
//   where /state is, dark and narrow without sideways scrolling;
// - with --api-key: the key prompt, once per tab, never in a URL.
// No console errors anywhere. Screenshots go to ARTIFACTS.
// Usage: node web_test.js PARLEY_BINARY TMP_DIR ARTIFACTS_DIR
'use strict';
const path = require('path');
const fs = require('fs');
const {check, launch, main, serve: serveIn, api, user, agent, action, observation, openPage,
  shot: shotIn} = require('./web_lib.js');

const [parley, tmp, artifacts] = process.argv.slice(2);
const serve = (name, extra) => serveIn(tmp, parley, name, extra);
const shot = (page, name, full) => shotIn(page, artifacts, name, full);

async function conversation(srv, key) {
  const [st, b] = await api(srv, key, 'POST', '/api/conversations', {});
  check(st === 201, 'POST /api/conversations', st, b);
  return b.id;
}

async function append(srv, key, cid, events) {
  const [st, b] = await api(srv, key, 'POST', `/api/conversations/${cid}/events/append`, events);
  check(st === 201, 'append', st, b);
}

async function hostedConversation(srv, behaviour, body = {}) {
  const [st, b] = await api(srv, null, 'POST', '/api/conversations',
    Object.assign({agent: {kind: 'ACPAgent', acp_command: [behaviour]}}, body));
  check(st === 201, 'POST /api/conversations with ' + behaviour, st, b);
  return b.id;
}

// A delegation (a subagent's call) and its result.
const task = (id, call, prompt, resp) => ({id, source: 'agent', kind: 'ActionEvent',
  thought: [{type: 'text', text: 'delegating'}],
  tool_name: 'task', tool_call_id: call, llm_response_id: resp,
  tool_call: {id: call, name: 'task', arguments: JSON.stringify({prompt}), origin: 'completion'},
  action: {kind: 'TaskAction', prompt, subagent_type: 'explore'}});
const taskDone = (id, call, aid, out) => ({id, source: 'environment',
  kind: 'ObservationEvent', tool_name: 'task', tool_call_id: call, action_id: aid,
  observation: {kind: 'TaskObservation', content: [{type: 'text', text: out}], task_id: 'sub-1'}});

// ---- a page ----------------------------------------------------------------

// The blocks of the conversation page in reading order (a pair's call, then its result).
const order = (page) => page.$$eval('#blocks > .chunk > *', (rows) => rows.flatMap((r) =>
  r.classList.contains('pair') ? [...r.children].map((c) => c.dataset.id) : [r.dataset.id]));

// ---- the tests -------------------------------------------------------------

// srv is stopped and started again on its port midway (a dropped socket).
async function withoutKey(srv, browser) {
  const cid = await conversation(srv);
  await append(srv, null, cid, [user('u1', 'list the files'), action('a1', 'c1', 'ls', 'r1'),
    observation('o1', 'c1', 'a1', 'notes.md\nmain.c'), agent('m1', 'There are two files.')]);
  const [st] = await api(srv, null, 'PATCH', `/api/conversations/${cid}`, {title: 'Files please'});
  check(st === 200, 'PATCH title', st);

  const context = await browser.newContext();
  const page = await openPage(context);
  // the list
  await page.goto(srv.base + '/');
  const row = page.locator(`tr.conv[data-id="${cid}"]`);
  await row.waitFor();
  check(await row.locator('td.title a').textContent() === 'Files please', 'the title in the list');
  await page.waitForFunction((id) => {
    const c = document.querySelector(`tr.conv[data-id="${id}"] td.count`);
    return c && c.textContent === '4';
  }, cid);
  await shot(page, 'list');

  // to the conversation, by its link
  await row.locator('td.title a').click();
  await page.waitForURL('**/conversations/' + cid);
  await page.locator('[data-id="m1"]').waitFor();
  const want = ['u1', 'a1-thought', 'c1', 'result-c1', 'm1'];
  check(JSON.stringify(await order(page)) === JSON.stringify(want), 'the blocks in order',
    await order(page));
  const pair = page.locator('.pair[data-call="c1"]');
  check(await pair.locator('[data-id="c1"]').count() === 1 &&
    await pair.locator('[data-id="result-c1"]').count() === 1, 'the call beside its result');
  check((await pair.locator('[data-id="result-c1"] pre').textContent()).includes('main.c'),
    'the result\'s text');
  check((await page.locator('[data-id="u1"] .text').textContent()) === 'list the files', 'the user\'s text');
  await page.locator('#live.on').waitFor();
  await shot(page, 'conversation');

  // live: appended after the page was drawn, no reload
  await page.evaluate(() => { window.notReloaded = true; });
  const evil = '<script>alert(1)</script><img src=x onerror="alert(2)">';
  // m3e is empty: the idle that ends the run (stuck: a monologue) removes it
  await append(srv, null, cid, [agent('m2', 'and one more thing'), agent('m3', evil), agent('m3e', '')]);
  await page.locator('[data-id="m3"]').waitFor();
  check(await page.evaluate(() => window.notReloaded === true), 'no reload');
  check(await page.locator('[data-id="m2"] .text').textContent() === 'and one more thing', 'live text');
  check(await page.locator('[data-id="m3"] .text').textContent() === evil, 'markup shown as text');
  check(await page.locator('[data-id="m3"]').isVisible(), 'visible');
  check(await page.locator('#blocks script, #blocks img').count() === 0, 'no element from an event');

  // a long result starts collapsed and opens
  const long = Array.from({length: 80}, (_, i) => 'line ' + i).join('\n');
  await append(srv, null, cid, [action('a2', 'c2', 'seq 80', 'r2'), observation('o2', 'c2', 'a2', long)]);
  const res = page.locator('[data-id="result-c2"]');
  await res.locator('.long:not(.open)').waitFor();
  await res.locator('button.more').click();
  await res.locator('.long.open').waitFor();

  // the box sends a user message; it comes back as a block
  await page.fill('#text', 'typed in the page');
  await page.click('#send-button');
  await page.waitForFunction(() => [...document.querySelectorAll('.b-user_message .text')]
    .some((t) => t.textContent === 'typed in the page'));
  await page.waitForFunction(() => document.getElementById('text').value === ''); // once sent
  await page.click('#pause');
  await page.waitForFunction(() => document.getElementById('status').textContent === 'paused');
  await shot(page, 'conversation-live');

  // a dropped socket: the page reconnects with after_index and catches up
  // with what came while it was away; it then holds what /state says
  await srv.stop();
  await page.locator('#live:not(.on)').waitFor();
  srv = await srv.restart();
  await append(srv, null, cid, [agent('m4', 'after the reconnect')]);
  await page.locator('[data-id="m4"]').waitFor();
  await page.locator('#live.on').waitFor();
  // what the browser logs of the outage itself is not the page's error
  page.problems = page.problems.filter((p) =>
    !/ERR_CONNECTION_REFUSED|WebSocket connection to .* failed/.test(p));
  const [sst, view] = await api(srv, null, 'GET', `/api/conversations/${cid}/state`);
  check(sst === 200, 'GET state', sst);
  check(JSON.stringify(await order(page)) === JSON.stringify(view.blocks.map((b) => b.id)),
    'the page holds what /state says', await order(page), view.blocks.map((b) => b.id));
  check(!view.blocks.some((b) => b.id === 'm3e'), 'the empty message was removed', view.blocks);

  // dark and narrow
  await page.emulateMedia({colorScheme: 'dark'});
  await page.setViewportSize({width: 380, height: 800});
  await shot(page, 'conversation-dark-narrow');
  check(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1),
    'no sideways scrolling on a narrow window');

  // a reconnect resumes where it was: the page holds what /state says
  check(page.dialogs.length === 0, 'no dialog fired', page.dialogs);
  check(page.problems.length === 0, 'no console errors', page.problems);
  await context.close();
}

// Markdown drawn as elements, safely; a subagent's call shown as one.
async function markdownAndSubagent(srv, context) {
  const cid = await conversation(srv);
  const md = '### Plan\n\nThis is **bold**, *em* and `code`; see [docs](https://example.com/d) ' +
    'and [bad](javascript:alert(1)).\n\n- one\n- two\n\n```sh\nls <dir>\n```\n\n> quoted <b>x</b>';
  await append(srv, null, cid, [user('u1', 'plan it'), agent('m1', md),
    task('t1', 'k1', 'count the lines', 'r1'), taskDone('o1', 'k1', 't1', '12 lines')]);
  const page = await openPage(context);
  await page.goto(`${srv.base}/conversations/${cid}`);
  const m = page.locator('[data-id="m1"] .md');
  await m.waitFor();
  check(await m.locator('h5').textContent() === 'Plan', 'a heading (### under the page\'s own: h5)');
  check(await m.locator('strong').textContent() === 'bold', 'bold');
  check(await m.locator('em').textContent() === 'em', 'emphasis');
  check(await m.locator('p code').textContent() === 'code', 'inline code');
  check(await m.locator('a').count() === 1, 'one link: javascript: is not one', await m.innerHTML());
  check(await m.locator('a').getAttribute('href') === 'https://example.com/d', 'the link');
  check((await m.locator('p').first().textContent()).includes('[bad](javascript:alert(1))'),
    'the unsafe link kept as text');
  check(await m.locator('li').count() === 2, 'a list');
  check(await m.locator('pre code').textContent() === 'ls <dir>', 'a code block, as text');
  check(await m.locator('blockquote').textContent() === 'quoted <b>x</b>', 'a quote, markup as text');
  check(await m.locator('b').count() === 0, 'no element from the text');
  // the task call is a subagent block, with its prompt and its result
  const s = page.locator('.b-subagent');
  await s.waitFor();
  check((await s.textContent()).includes('count the lines') && (await s.textContent()).includes('12 lines'),
    'the subagent with its prompt and result', await s.textContent());
  await shot(page, 'markdown-subagent');
  check(page.problems.length === 0, 'no console errors', page.problems);
  await page.close();
}

// A conversation of a hosted scripted agent, driven from the page: the
// box sends, the agent's turn is drawn live (thinking, calls beside their
// results, its message); a confirmation is answered with the buttons.
async function hosted(srv, context) {
  const cid = await hostedConversation(srv, 'full');
  const page = await openPage(context);
  await page.goto(`${srv.base}/conversations/${cid}`);
  await page.locator('#live.on').waitFor();
  await page.fill('#text', 'fix the typo');
  await page.click('#send-button');
  await page.waitForFunction(() => document.body.dataset.status === 'finished');
  const pair = page.locator('.pair[data-call="call-1-1"]');
  await pair.waitFor();
  check(await pair.locator('.b-tool_use .name').textContent() === '$ ls', 'the call\'s title', await pair.textContent());
  check((await pair.locator('.b-tool_result').textContent()).includes('file1.txt'), 'beside its result',
    await pair.textContent());
  check(await page.locator('details.thinking').count() >= 1, 'thinking, collapsed');
  check(await page.locator('details.thinking[open]').count() === 0, 'collapsed until opened');
  check(await page.locator('.b-user_message .md').first().textContent() === 'fix the typo', 'the prompt');
  await shot(page, 'hosted');
  await page.close();

  // a confirmation: Confirm and Reject show while it waits, and answer it
  const pid = await hostedConversation(srv, 'permission', {confirmation_policy: {kind: 'AlwaysConfirm'}});
  const p2 = await openPage(context);
  await p2.goto(`${srv.base}/conversations/${pid}`);
  await p2.locator('#live.on').waitFor();
  check(await p2.locator('#confirm').isHidden(), 'no Confirm while nothing waits');
  // confirmed, the run goes on to its end; rejected, the conversation
  // goes idle (as upstream), then the agent's turn goes on and ends it
  for (const [button, said, ends] of [['#confirm', 'allowed', ['finished']],
    ['#reject', 'rejected', ['finished']]]) {
    await p2.fill('#text', 'clean up');
    await p2.click('#send-button');
    await p2.locator(button).waitFor({state: 'visible'});
    await shot(p2, 'waiting-for-confirmation');
    await p2.click(button);
    await p2.waitForFunction((t) => [...document.querySelectorAll('.b-assistant_text .md')]
      .some((e) => e.textContent === t), said);
    await p2.waitForFunction((e) => e.includes(document.body.dataset.status), ends);
    check(await p2.locator('#confirm').isHidden(), 'Confirm goes once answered');
  }
  check(p2.problems.length === 0, 'no console errors', p2.problems);
  await p2.close();

  // a stuck agent, and one that breaks the rules under observe: marked
  const sid = await hostedConversation(srv, 'loop-error');
  const vid = await hostedConversation(srv, 'interleave', {compliance_policy: 'observe'});
  for (const [c, t] of [[sid, 'read it'], [vid, 'build']]) {
    const [st] = await api(srv, null, 'POST', `/api/conversations/${c}/events`,
      {role: 'user', content: [{type: 'text', text: t}], run: true});
    check(st === 200, 'a message to ' + c, st);
  }
  const p3 = await openPage(context);
  await p3.goto(`${srv.base}/conversations/${sid}`);
  await p3.locator('.block.is-stuck .kind').filter({hasText: 'Stuck'}).waitFor();
  await p3.waitForFunction(() => document.getElementById('status').textContent === 'stuck');
  await shot(p3, 'stuck');
  await p3.goto(`${srv.base}/conversations/${vid}`);
  const v = p3.locator('.block.is-violation');
  await v.waitFor();
  check((await v.textContent()).includes('interleaved'), 'the violation names its rule', await v.textContent());
  await shot(p3, 'violation');
  check(p3.problems.length === 0, 'no console errors', p3.problems);
  await p3.close();
}

// A long conversation: the page draws the pages near the screen only,
// opens at the end, fetches what the reader scrolls to, and keeps up with
// what comes while the reader is elsewhere.
async function longConversation(srv, context) {
  const N = 3000;
  const cid = await conversation(srv);
  for (let i = 0; i < N; i += 500) {
    const evs = [];
    for (let k = i; k < i + 500; k += 2) evs.push(user('v' + k, 'question ' + k), agent('v' + (k + 1), 'answer ' + (k + 1)));
    await append(srv, null, cid, evs);
  }
  const page = await openPage(context);
  await page.goto(`${srv.base}/conversations/${cid}`);
  await page.locator(`[data-id="v${N - 1}"]`).waitFor();
  await page.locator('#live.on').waitFor();
  const drawn = () => page.locator('#blocks .block').count();
  check(await page.evaluate(() => document.getElementById('blocks').dataset.total) === String(N), 'the total');
  check(await drawn() < 1000, 'only pages near the screen are drawn', await drawn());
  // to the top: the first blocks come
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.locator('[data-id="v0"]').waitFor();
  check(await drawn() < 1000, 'still a few pages', await drawn());
  // an append while the reader is at the top: counted, not scrolled to
  await append(srv, null, cid, [user('w0', 'one more')]);
  await page.waitForFunction((n) => document.getElementById('blocks').dataset.total === String(n), N + 1);
  check(await page.locator('[data-id="v0"]').isVisible(), 'the reader stays where they were');
  // the middle, by scrolling there
  await page.evaluate(() => window.scrollTo(0, document.documentElement.scrollHeight / 2));
  await page.waitForFunction(() => [...document.querySelectorAll('#blocks .block')]
    .some((b) => /^v1[2-8]\d\d$/.test(b.dataset.id)));
  // the end again: the new block is there
  await page.evaluate(() => window.scrollTo(0, document.documentElement.scrollHeight));
  await page.locator('[data-id="w0"]').waitFor();
  await shot(page, 'long', false);
  check(page.problems.length === 0, 'no console errors', page.problems);
  await page.close();
}

async function withKey(srv, key, browser) {
  const cid = await conversation(srv, key);
  await append(srv, key, cid, [user('u1', 'behind a key')]);
  const [st] = await api(srv, null, 'GET', `/api/conversations/${cid}/state`);
  check(st === 401, 'the API wants the key', st);

  const context = await browser.newContext();
  const page = await openPage(context);
  await page.goto(`${srv.base}/conversations/${cid}`);
  await page.locator('#key-form').waitFor({state: 'visible'});
  await shot(page, 'key-prompt');
  await page.fill('#key-input', key);
  await page.click('#key-form button[type=submit]');
  await page.locator('[data-id="u1"]').waitFor();
  check(await page.locator('#key-form').isHidden(), 'the prompt goes away');
  // live through the WebSocket, authenticated by its first frame
  await page.locator('#live.on').waitFor();
  await append(srv, key, cid, [agent('m1', 'seen live')]);
  await page.locator('[data-id="m1"]').waitFor();
  check(!page.url().includes(key), 'the key is never in the URL', page.url());
  check(await page.evaluate(() => sessionStorage.getItem('parley.apiKey')) === key, 'kept for the tab');
  // the list, in the same tab: no second prompt
  await page.goto(srv.base + '/');
  await page.locator(`tr.conv[data-id="${cid}"]`).waitFor();
  check(await page.locator('#key-form').isHidden(), 'asked once');
  await shot(page, 'list-with-key');
  check(page.problems.every((p) => /401/.test(p)), 'no console errors but the 401s', page.problems);
  check(page.dialogs.length === 0, 'no dialog fired', page.dialogs);
  await context.close();
}

main('web', async () => {
  fs.mkdirSync(artifacts, {recursive: true});
  const browser = await launch();
  const acp = path.join(__dirname, '..', 'node', 'acp_agent.mjs');
  const agents = ['full', 'permission', 'loop-error', 'interleave'].flatMap((b) =>
    ['--agent', `${b}=node '${acp}' ${b}`]);
  const open = await serve('open', agents);
  const context = await browser.newContext();
  await markdownAndSubagent(open, context);
  await hosted(open, context);
  await longConversation(open, context);
  await context.close();
  await withoutKey(open, browser);
  await withKey(await serve('keyed', ['--api-key', 'webkey']), 'webkey', browser);
});
