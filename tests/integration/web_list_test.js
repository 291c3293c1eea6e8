// web_list_test.js - the page of conversations (GET /) in a real browser:
// Debian's chromium, headless, through playwright-core (web_lib.js). A
// `parley serve` of its own gets 122 conversations over REST (three pages
// of 50): 120 plain ones, one in observe mode with a violation, one the
// stuck detector finds stuck. The page must show: the total and the pages
// (next, previous, first), both orders of both sortable columns, the
// status filter, the violation and the stuck finding counted and marked,
// a row changing live without a reload (the same row node, the focus kept),
// the chart of events/s and connections drawing from /metrics, nothing
// fetched while the tab is hidden; with --api-key, the key prompt once;
// no console errors; screenshots (light, dark and narrow) in ARTIFACTS.
// Every wait is a condition with a deadline.
// Usage: node web_list_test.js PARLEY_BINARY TMP_DIR ARTIFACTS_DIR
'use strict';
const fs = require('fs');
const {T, check, launch, main, serve, api, user, agent, action, observation, openPage, shot} =
  require('./web_lib.js');

const [parley, tmp, artifacts] = process.argv.slice(2);
const PLAIN = 120;
let br = null; // the browser

async function create(srv, key, body) {
  const [st, b] = await api(srv, key, 'POST', '/api/conversations', body);
  check(st === 201, 'POST /api/conversations', st, b);
  return b.id;
}

async function append(srv, key, cid, events) {
  const [st, b] = await api(srv, key, 'POST', `/api/conversations/${cid}/events/append`, events);
  check(st === 201, 'append', st, b);
}

async function info(srv, cid) {
  const [st, b] = await api(srv, null, 'GET', `/api/conversations/${cid}`);
  check(st === 200, 'GET conversation', st, b);
  return b;
}

// Poll the REST API until cond(info) holds.
async function until(srv, cid, what, cond) {
  const deadline = Date.now() + T;
  for (;;) {
    const i = await info(srv, cid);
    if (cond(i)) return i;
    check(Date.now() < deadline, 'timed out waiting for ' + what, i);
    await new Promise((r) => setTimeout(r, 20)); // a poll interval, not a synchronization
  }
}

const rowSel = (id) => `tr.conv[data-id="${id}"]`;
const titles = (page) => page.$$eval('#rows tr.conv td.title a', (as) => as.map((a) => a.textContent));
const waitWhere = (page, text) => page.waitForFunction((t) =>
  document.getElementById('where').textContent === t, text);
const waitFirstTitle = (page, title) => page.waitForFunction((t) => {
  const a = document.querySelector('#rows tr.conv td.title a');
  return a && a.textContent === t;
}, title);

async function fill(srv) {
  const ids = [];
  for (let i = 0; i < PLAIN; i++)
    ids.push(await create(srv, null, {title: 'conv ' + String(i).padStart(3, '0')}));
  // observe mode: an agent's message while its call is pending is appended,
  // and recorded as a ComplianceViolation
  const obs = await create(srv, null, {title: 'observed', compliance_policy: 'observe'});
  await append(srv, null, obs, [user('u1', 'list the files'), action('a1', 'c1', 'ls', 'r1')]);
  await append(srv, null, obs, [agent('m1', 'while the call runs')]);
  await until(srv, obs, 'the violation', (i) => i.violations === 1);
  // the same action and observation four times: the stuck detector's rule
  const stuck = await create(srv, null, {title: 'stuck one'});
  const turns = [user('u1', 'list the files')];
  for (let i = 1; i <= 4; i++)
    turns.push(action('a' + i, 'c' + i, 'ls', 'r' + i), observation('o' + i, 'c' + i, 'a' + i, 'a.txt'));
  await append(srv, null, stuck, turns);
  await until(srv, stuck, 'the stuck finding', (i) => i.stuck_findings === 1 &&
    i.execution_status === 'stuck');
  return {ids, obs, stuck};
}

async function withoutKey(srv) {
  const {ids, obs, stuck} = await fill(srv);
  const total = PLAIN + 2;
  const context = await br.newContext({viewport: {width: 1200, height: 900}});
  const page = await openPage(context);
  const searches = [];
  page.on('request', (r) => { if (r.url().includes('/api/conversations/')) searches.push(r.url()); });
  await page.goto(srv.base + '/');

  // the first page, newest first, with the total; one search and one count
  // per refresh, nothing per row
  await waitWhere(page, `1–50 of ${total} · page 1 of 3`);
  check((await titles(page)).length === 50, 'fifty rows', await titles(page));
  check((await titles(page))[0] === 'stuck one' && (await titles(page))[2] === 'conv 119',
    'newest first', await titles(page));
  check(searches.every((u) => /\/api\/conversations\/(search|count)(\?|$)/.test(u)),
    'the page asks search and count only', searches.filter((u) => !/search|count/.test(u)));

  // the stuck one and the observed one, counted and marked
  const st = page.locator(rowSel(stuck));
  check(await st.locator('.status').textContent() === 'stuck', 'shown stuck');
  check(await st.locator('td.stuck').textContent() === '1', 'its finding counted');
  check(await st.locator('td.stuck.flag').count() === 1, 'and marked');
  check(/\bhas-stuck\b/.test(await st.getAttribute('class')), 'the row marked');
  check(await st.locator('td.violations').textContent() === '0', 'no violation there');
  const ob = page.locator(rowSel(obs));
  check(await ob.locator('td.violations').textContent() === '1', 'the violation counted');
  check(await ob.locator('td.violations.flag-bad').count() === 1, 'and marked');
  check(await ob.locator('td.count').textContent() === String((await info(srv, obs)).event_count),
    'its event count');
  check(await page.locator('#rows td.flag').count() === 2, 'nothing else marked');
  await shot(page, artifacts, 'list');

  // pages: next, next (the last, 22), previous, first
  check(await page.locator('#prev').isDisabled() && await page.locator('#first').isDisabled(),
    'no going back from the first page');
  await page.click('#next');
  await waitWhere(page, `51–100 of ${total} · page 2 of 3`);
  await waitFirstTitle(page, 'conv 071');
  await page.click('#next');
  await waitWhere(page, `101–${total} of ${total} · page 3 of 3`);
  check((await titles(page)).length === 22, 'the last page holds the rest');
  check((await titles(page)).at(-1) === 'conv 000', 'down to the oldest');
  check(await page.locator('#next').isDisabled(), 'no page after the last');
  await shot(page, artifacts, 'list-page3');
  await page.click('#prev');
  await waitWhere(page, `51–100 of ${total} · page 2 of 3`);
  await page.click('#first');
  await waitWhere(page, `1–50 of ${total} · page 1 of 3`);

  // sorted by a header: the same one flips the order
  const created = page.locator('th:has(button.sort[data-key="CREATED_AT"])');
  await created.locator('button').click();
  await waitFirstTitle(page, 'conv 000');
  check(await created.getAttribute('aria-sort') === 'ascending', 'the header says ascending');
  check(new URL(page.url()).searchParams.get('sort') === 'CREATED_AT', 'the order in the URL');
  await created.locator('button').click();
  await waitFirstTitle(page, 'stuck one');
  check(await created.getAttribute('aria-sort') === 'descending', 'then descending');

  // by last activity: what just had an event comes first, live
  await page.selectOption('#sort', 'UPDATED_AT_DESC');
  await append(srv, null, ids[7], [user('late', 'anyone there?')]);
  await waitFirstTitle(page, 'conv 007');
  await page.click('th button.sort[data-key="UPDATED_AT"]');
  await page.waitForFunction(() => document.querySelector('#rows td.title a').textContent !== 'conv 007');
  check(await page.locator('th:has(button.sort[data-key="UPDATED_AT"])').getAttribute('aria-sort') ===
    'ascending', 'least recently active first');
  await page.selectOption('#sort', 'CREATED_AT_DESC');
  await waitFirstTitle(page, 'stuck one');

  // filtered by status
  await page.selectOption('#status', 'stuck');
  await waitWhere(page, '1–1 of 1 · page 1 of 1');
  check(JSON.stringify(await titles(page)) === '["stuck one"]', 'only the stuck one',
    await titles(page));
  check(new URL(page.url()).searchParams.get('status') === 'stuck', 'the filter in the URL');
  await shot(page, artifacts, 'list-stuck');
  await page.selectOption('#status', 'running');
  await page.locator('#empty').waitFor({state: 'visible'});
  await page.selectOption('#status', '');
  await waitWhere(page, `1–50 of ${total} · page 1 of 3`);

  // live: a row's count moves without a reload, in the same row node, and
  // the focus stays where it was
  const live = ids[PLAIN - 1];
  await page.evaluate((id) => {
    window.notReloaded = true;
    window.keptRow = document.querySelector(`tr.conv[data-id="${id}"]`);
    window.keptRow.querySelector('td.title a').focus();
  }, live);
  const before = Number(await page.locator(rowSel(live) + ' td.count').textContent());
  await append(srv, null, live, [user('l1', 'one'), agent('l2', 'two'), user('l3', 'three')]);
  await page.waitForFunction(([id, n]) =>
    document.querySelector(`tr.conv[data-id="${id}"] td.count`).textContent === String(n),
  [live, before + 3]);
  check(await page.evaluate((id) => window.notReloaded === true &&
    window.keptRow === document.querySelector(`tr.conv[data-id="${id}"]`) &&
    document.activeElement === window.keptRow.querySelector('td.title a'), live),
  'the same row, no reload, the focus kept');

  // the chart: events/s from /metrics rise once events are appended, and
  // the connections count at least the page's own
  const chart = page.locator('#chart-events svg');
  await page.waitForFunction(() => Number(document.querySelector('#chart-events svg').dataset.points) >= 2);
  const burst = Array.from({length: 40}, (_, i) => user('b' + i, 'burst ' + i));
  await append(srv, null, ids[0], burst);
  await page.waitForFunction(() => Number(document.querySelector('#chart-events svg').dataset.max) > 0);
  check(Number(await chart.getAttribute('data-points')) <= 120, 'two minutes at most');
  await page.waitForFunction(() => Number(document.getElementById('now-conns').textContent) >= 1);
  check(await page.locator('#chart-conns svg polyline').getAttribute('points') !== '',
    'the connections drawn');

  // hidden: nothing is fetched until it is shown again
  await page.evaluate(() => {
    Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
    document.dispatchEvent(new Event('visibilitychange'));
  });
  const quiet = await page.waitForRequest(() => true, {timeout: 5000}).then(() => false, () => true);
  check(quiet, 'no request while the tab is hidden');
  await page.evaluate(() => {
    Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});
    document.dispatchEvent(new Event('visibilitychange'));
  });
  await page.waitForRequest((r) => r.url().includes('/api/conversations/search'));

  // dark, then narrow too
  await page.emulateMedia({colorScheme: 'dark'});
  await shot(page, artifacts, 'list-dark', false);
  await page.setViewportSize({width: 380, height: 800});
  await shot(page, artifacts, 'list-dark-narrow', false);
  check(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1),
    'no sideways scrolling on a narrow window');
  check(await page.evaluate(() => getComputedStyle(document.body).backgroundColor) !==
    'rgb(251, 251, 250)', 'dark colours');

  check(page.dialogs.length === 0, 'no dialog fired', page.dialogs);
  check(page.problems.length === 0, 'no console errors', page.problems);
  await context.close();
}

async function withKey(srv, key) {
  const cid = await create(srv, key, {title: 'behind a key'});
  await append(srv, key, cid, [user('u1', 'hello')]);
  const context = await br.newContext();
  const page = await openPage(context);
  // the count's 401 held until the key is in (the search's asks for it):
  // a 401 to a request sent before the key must not ask again
  let release;
  const held = new Promise((resolve) => { release = resolve; });
  let holding = true;
  await page.route('**/api/conversations/count*', async (route) => {
    if (holding && !route.request().headers()['x-session-api-key']) {
      holding = false;
      await held;
    }
    await route.continue();
  });
  await page.goto(srv.base + '/');
  await page.locator('#key-form').waitFor({state: 'visible'});
  await page.fill('#key-input', key);
  await page.click('#key-form button[type=submit]');
  check(!holding, 'the count was held');
  release();
  await page.locator(rowSel(cid)).waitFor();
  check(await page.locator(rowSel(cid) + ' td.count').textContent() === '1', 'its count');
  await page.waitForFunction(() => Number(document.querySelector('#chart-conns svg').dataset.points) >= 2);
  check(await page.locator('#key-form').isHidden(), 'asked once');
  check(!page.url().includes(key), 'the key is never in the URL', page.url());
  check(page.problems.every((p) => /401/.test(p)), 'no console errors but the 401s', page.problems);
  await context.close();
}

main('web list', async () => {
  fs.mkdirSync(artifacts, {recursive: true});
  br = await launch();
  await withoutKey(await serve(tmp, parley, 'list', []));
  await withKey(await serve(tmp, parley, 'list-keyed', ['--api-key', 'listkey']), 'listkey');
});
