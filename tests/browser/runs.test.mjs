// issue 35: serve's runs pages in Chromium, on a store of 10,000 generated runs across 20 tasks and 3 hosts
// (tests/support/runs_generator.hpp: every field a closed formula of the run's number, so the counts below are known):
// filter, sort, paginate, open a run, back/forward, a Slurm job's page, the compare link; no plotly.js on /runs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServe, launchChromium } from './lib.mjs';

const WS = process.env.WATTSCOPE_BINARY;
const GEN = process.env.WATTSCOPE_GEN_RUNS;
assert.ok(WS && GEN, 'WATTSCOPE_BINARY and WATTSCOPE_GEN_RUNS must be set (ctest sets them)');
const N = 10000;
const dir = mkdtempSync(join(tmpdir(), 'wattscope-runs-'));
let serve, base, browser, mariadb, store = join(dir, 'runs.db');
// browser.runs_mariadb: the same test with the runs in a private MariaDB (tests/support/mariadb_main.cpp), started
// here and stopped when its standard input closes.
const MARIADB = process.env.WATTSCOPE_TEST_MARIADB;

async function startMariaDb() {
  mariadb = spawn(MARIADB, [], { stdio: ['pipe', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    mariadb.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/^(mysql:\/\/\S+)\n/);
      if (m) resolve(m[1]);
    });
    mariadb.on('exit', (code) => reject(new Error(`wattscope_test_mariadb exited ${code}`)));
  });
}

// The generator's formulas (runs_generator.hpp), for the expected figures.
const energyOf = (i) => (i % 25 === 24 ? null : 100 + ((7919 * i) % 10000) / 10);
const id = (i) => 'gen-' + String(i).padStart(6, '0');

before(async () => {
  if (MARIADB) store = await startMariaDb();
  const g = spawnSync(GEN, [store, String(N)], { encoding: 'utf8' });
  assert.equal(g.status, 0, g.stderr);
  ({ serve, base } = await startServe(WS, ['--listen', '127.0.0.1:0', '--interval', '500ms', '--db', store], {
    cwd: dir, env: { ...process.env, WATTSCOPE_NVML_LIBRARY: '/nonexistent/libnvidia-ml.so.1' },
  }));
  browser = await launchChromium();
});

after(async () => {
  if (browser) await browser.close();
  if (serve) {
    const gone = new Promise((r) => serve.once('exit', r));
    serve.kill('SIGTERM');
    if (MARIADB) await gone; // the server's connection closes before MariaDB stops
  }
  if (mariadb) {
    const gone = new Promise((r) => mariadb.once('exit', r));
    mariadb.stdin.end();
    await gone;
  }
  rmSync(dir, { recursive: true, force: true });
});

async function openPage(path) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [], requests = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('request', (r) => requests.push(r.url()));
  await page.goto(base + path);
  return { page, errors, requests };
}

async function loaded(page, after = 0) {
  await page.waitForFunction((n) => Number(document.body.dataset.loaded || 0) > n, after, { timeout: 20000 });
  return Number(await page.evaluate(() => document.body.dataset.loaded));
}
const runIds = (page) => page.$$eval('#runs tbody tr', (trs) => trs.map((tr) => tr.dataset.run));
const status = (page) => page.textContent('#status');

function shot(page, name) {
  if (MARIADB) name = 'mariadb-' + name;
  const path = join(dir, name);
  return page.screenshot({ path }).then(() => {
    if (process.env.WATTSCOPE_SCREENSHOT_DIR) copyFileSync(path, join(process.env.WATTSCOPE_SCREENSHOT_DIR, name));
  });
}

test('the runs table: newest first, filter, sort, paginate, back and forward, all in the URL', async () => {
  // serve browses the store read only: the 10,000 runs and no run of its own.
  const { page, errors, requests } = await openPage('/runs');
  let n = await loaded(page);
  assert.match(await status(page), /^10000 runs$/);
  let ids = await runIds(page);
  assert.equal(ids.length, 50);
  assert.equal(ids[0], id(N - 1), 'newest first');
  assert.ok(!requests.some((u) => u.includes('plotly')), '/runs loads no plotly.js');
  const fp = await page.evaluate(() => performance.getEntriesByName('first-contentful-paint')[0]?.startTime);
  assert.ok(fp > 0, 'first contentful paint is measured');

  // Filter by task: the runs of jobs k with k % 20 == 3 (501 of the 10,000), all of task03.
  const task03 = [];
  for (let i = 0; i < N; i++) if (Math.floor(i / 3) % 20 === 3) task03.push(i);
  assert.equal(task03.length, 501);
  await page.fill('input[name=task]', 'task03');
  await page.click('button[type=submit]');
  n = await loaded(page, n);
  assert.equal(new URL(page.url()).search, '?task=task03&limit=50');
  assert.match(await status(page), /^501 runs$/);
  const tasks = await page.$$eval('#runs tbody tr td:nth-child(4)', (tds) => tds.map((td) => td.textContent));
  assert.deepEqual([...new Set(tasks)], ['task03']);

  // Sort by energy: the first click is the most energy first.
  await page.click('th[data-sort=energy]');
  n = await loaded(page, n);
  assert.match(page.url(), /sort=-energy/);
  ids = await runIds(page);
  const byEnergy = task03.filter((i) => energyOf(i) !== null).sort((a, b) => energyOf(b) - energyOf(a) || b - a);
  assert.deepEqual(ids, byEnergy.slice(0, 50).map(id));
  await shot(page, 'runs-table.png');

  // Next page: runs 51-100 of the same order.
  await page.click('#next');
  n = await loaded(page, n);
  assert.match(page.url(), /offset=50/);
  assert.equal(await page.textContent('#range'), '51–100 of 501');
  assert.deepEqual(await runIds(page), byEnergy.slice(50, 100).map(id));

  // Back: the first page sorted; back again: unsorted; forward: sorted again.
  await page.goBack();
  n = await loaded(page, n);
  assert.doesNotMatch(page.url(), /offset/);
  assert.deepEqual(await runIds(page), byEnergy.slice(0, 50).map(id));
  await page.goBack();
  n = await loaded(page, n);
  assert.doesNotMatch(page.url(), /sort/);
  assert.equal(await page.inputValue('input[name=task]'), 'task03', 'the form follows the URL');
  await page.goForward();
  n = await loaded(page, n);
  assert.match(page.url(), /sort=-energy/);
  assert.deepEqual(await runIds(page), byEnergy.slice(0, 50).map(id));

  // A filter the server refuses is said on the page.
  await page.fill('input[name=from]', 'last week');
  await page.click('button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#status').className === 'error');
  assert.match(await status(page), /'from'/);
  assert.deepEqual(errors.filter((e) => !/400/.test(e)), []);
  await page.close();
});

test('a stable URL opens the same view; a tag and a method filter; the compare link', async () => {
  const { page, errors } = await openPage('/runs?tag=slurm_partition%3Ddebug&method=counter&host=node0&sort=start&limit=25');
  await loaded(page);
  // (i/3) % 4 == 0, i % 4 == 0 (counter), i % 25 != 24 and i % 3 == 0: i = 12 m, less i ≡ 24 mod 25.
  const want = [];
  for (let i = 0; i < N; i++)
    if (Math.floor(i / 3) % 4 === 0 && i % 4 === 0 && i % 25 !== 24 && i % 3 === 0) want.push(i);
  assert.ok(want.length > 25, 'a view with more than one page');
  assert.match(await status(page), new RegExp(`^${want.length} runs$`));
  assert.deepEqual(await runIds(page), want.slice(0, 25).map(id));
  assert.equal(await page.$eval('select[name=method]', (s) => s.value), 'counter');
  const methods = await page.$$eval('#runs tbody .method', (d) => [...new Set(d.map((x) => x.textContent))]);
  assert.deepEqual(methods, ['counter']);
  const boxes = await page.$$('#runs tbody input[type=checkbox]');
  await boxes[0].check();
  await boxes[1].check();
  const href = await page.getAttribute('#compare', 'href');
  assert.equal(href, `/runs/compare?runs=${id(want[0])},${id(want[1])}`);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a run opens its page: the report rendered from the store, then cached', async () => {
  const { page, errors } = await openPage('/runs?task=task07&limit=25');
  await loaded(page);
  const first = await page.getAttribute('#runs tbody tr a', 'href');
  const [response] = await Promise.all([page.waitForNavigation(), page.click('#runs tbody tr a')]);
  assert.equal(response.status(), 200);
  assert.equal(new URL(page.url()).pathname, first);
  assert.equal(response.headers()['x-wattscope-cache'], 'miss');
  const text = await page.textContent('body');
  assert.ok(text.includes(first.slice('/runs/'.length)), 'the run id is on its page');
  assert.ok(text.includes('task07'));
  await page.goBack();
  await loaded(page);
  assert.match(page.url(), /task=task07/);
  const again = await page.request.get(base + first);
  assert.equal(again.headers()['x-wattscope-cache'], 'hit');
  assert.deepEqual(errors, []);
  await page.close();
});

test('a Slurm job page: its nodes side by side and the job total with its method', async () => {
  // Job 5010 is runs 30, 31 and 32 on node0, node1 and node2.
  const { page, errors } = await openPage('/jobs/5010');
  await page.waitForFunction(() => document.body.dataset.loaded === '1', null, { timeout: 20000 });
  const nodes = await page.$$eval('.node', (cards) => cards.map((c) => c.dataset.node));
  assert.deepEqual(nodes, ['node0', 'node1', 'node2']);
  const total = energyOf(30) + energyOf(31) + energyOf(32);
  const shown = await page.textContent('#total');
  assert.ok(shown.includes((total / 1e3).toFixed(2) + ' kJ') || shown.includes(total.toFixed(1) + ' J'), shown);
  // 30: mixed (i % 4 == 2), 31: estimated, 32: counter.
  assert.match(shown, /mixed/);
  await shot(page, 'runs-job.png');
  const missing = await openPage('/jobs/999999');
  await missing.page.waitForFunction(() => document.querySelector('#status').className === 'error');
  assert.match(await missing.page.textContent('#status'), /slurm_job_id=999999/);
  await missing.page.close();
  assert.deepEqual(errors, []);
  await page.close();
});
