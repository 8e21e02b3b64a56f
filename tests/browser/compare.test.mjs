// Issue 35: several runs compared, in the static report and in serve's compare view. Ten runs of three tasks (one with
// a long name) with phases and work, recorded on a fake GPU whose power differs by task. At 1,280 × 800 the report
// fits the width and about three screens, every cut label carries the whole in its title, and each task's mean
// energy, J per unit and the verdict are those of `wattscope compare --json` for the same runs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launchChromium, startServe } from './lib.mjs';

const WS = process.env.WATTSCOPE_BINARY;
const FAKE = process.env.WATTSCOPE_FAKE_NVML;
assert.ok(WS && FAKE, 'WATTSCOPE_BINARY and WATTSCOPE_FAKE_NVML must be set (ctest sets them)');

const dir = mkdtempSync(join(tmpdir(), 'wattscope-compare-'));
const db = join(dir, 'runs.db');
const LONG = 'bert-large-uncased-whole-word-masking-finetuned-squad-lr3e-5-seed42-dataloader-v2';
const TASKS = [['bert', 4, 300000], ['gpt', 3, 600000], [LONG, 3, 310000]];
let browser;
const ids = {}; // task -> run ids, oldest first

function ws(args) {
  const r = spawnSync(WS, args, { cwd: dir, encoding: 'utf8' });
  assert.equal(r.status, 0, `wattscope ${args.join(' ')} failed:\n${r.stderr}`);
  return r.stdout;
}

function record(task, power_mw, k) {
  const scenario = join(dir, `scenario-${power_mw}-${k}.json`);
  // A little noise between runs of a task (the base power moves by 1 %), so the intervals are not empty.
  const base = power_mw * (1 + 0.01 * ((k * 7) % 5 - 2));
  writeFileSync(scenario, JSON.stringify({ devices: [{ name: 'NVIDIA H100 80GB HBM3', uuid: 'GPU-0-cmp', metrics: {
    power_instant_mw: base, energy_mj: { sine_integral: { base, amp: 0, period_s: 1 } }, util_gpu: 90, util_mem: 40,
    mem_used_bytes: 2e9, mem_total_bytes: 85899345920, temp_gpu: 60, clock_sm: 1980, clock_mem: 2619 } }] }));
  const env = { ...process.env, WATTSCOPE_NVML_LIBRARY: FAKE, WATTSCOPE_FAKE_NVML_SCENARIO: scenario };
  delete env.CUDA_VISIBLE_DEVICES;
  const m = `'${WS}' mark`;
  // A run's energy is its power times its length, and a loaded machine adds up to ~0.1 s to a length (each `mark` is a
  // process started): sleeps long enough that the lengths vary by a few percent, not by a quarter (0.25 s and 0.1 s
  // gave gpt against bert p = 0.053 once in CI: t = 3.96 over 3 and 4 runs).
  const script = `${m} begin train && sleep 0.8 && ${m} work 64 samples && ${m} end train && ${m} begin eval && sleep 0.3 && ${m} end eval`;
  const r = spawnSync(WS, ['run', '--db', db, '--task', task, '--interval', '50ms', '--', 'sh', '-c', script], { cwd: dir, env, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(ws(['show', '--db', db, '--json'])).run_id;
}

before(async () => {
  for (const [task, n, power] of TASKS) {
    ids[task] = [];
    for (let k = 0; k < n; k++) ids[task].push(record(task, power, k));
  }
  browser = await launchChromium();
});
after(async () => { await browser?.close(); rmSync(dir, { recursive: true, force: true }); });

async function open(url) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(url);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  return { page, errors };
}

const close = (a, b, what) => assert.ok(Math.abs(Number(a) - Number(b)) <= 1e-9 * Math.max(1, Math.abs(Number(b))), `${what}: page ${a} vs compare ${b}`);

// The page's figures against `wattscope compare A B --json` over the same runs: both tasks' mean energy per run and
// J per sample, and the verdict (its direction, size and significance).
async function expectLikeCompare(page, a, b) {
  const c = JSON.parse(ws(['compare', '--db', db, a, b, '--json']));
  const value = (key) => page.getAttribute(`[data-key="${key}"]`, 'data-value');
  close(await value(`task.${a}.energy_j`), c.a.energy_j.mean, `${a} energy`);
  close(await value(`task.${b}.energy_j`), c.b.energy_j.mean, `${b} energy`);
  const work = c.tests.find((t) => t.figure === 'work.samples.energy_per_unit_j');
  assert.ok(work, JSON.stringify(c.tests.map((t) => t.figure)));
  close(await value(`task.${a}.work.samples.energy_per_unit_j`), work.a.mean, `${a} J per sample`);
  close(await value(`task.${b}.work.samples.energy_per_unit_j`), work.b.mean, `${b} J per sample`);
  const li = page.locator(`li[data-verdict="task ${b}"]`);
  assert.equal(await li.getAttribute('data-significant'), String(c.significant));
  close(await li.getAttribute('data-difference-pct'), c.difference_pct, 'difference %');
  const words = await li.innerText();
  assert.ok(words.startsWith(`task ${b} uses ${String(Number(Math.abs(c.difference_pct).toPrecision(3)))} %`), words);
  assert.match(words, c.significant ? /significant at 95 %/ : /not distinguishable at 95 %/);
  return c;
}

// Every label either whole or cut with the whole in a title (its own or its cell's).
async function cutLabelsWithoutTitle(page) {
  return page.evaluate(() => {
    const bad = [];
    for (const e of document.querySelectorAll('section.cmp *, details > summary')) {
      // SVG text (the power chart's ticks and legend) is Plotly's, which shortens nothing; its boxes have no client width.
      if (e instanceof SVGElement || e.closest('[data-chart]')) continue;
      if (!e.textContent.trim() || e.children.length && !e.matches('.lbl span, summary')) continue;
      if (e.scrollWidth <= e.clientWidth + 1) continue;
      const holder = e.closest('[title]');
      const whole = e.textContent.trim();
      if (!holder || !holder.title || !(holder.title.includes(whole.replace(/ · \d+ runs?$/, '')) || whole.includes(holder.title)))
        bad.push(whole);
    }
    return bad;
  });
}

test('ten runs of three tasks in the static report: 1,280 px wide, three screens, the figures of compare', async () => {
  const all = TASKS.flatMap(([task]) => ids[task]);
  const file = join(dir, 'cmp10.html');
  ws(['report', '--db', db, ...all, '-o', file]);
  const { page, errors } = await open('file://' + file);
  assert.deepEqual(errors, []);
  assert.equal(await page.getAttribute('[data-comparison]', 'data-comparison'), '10');
  const size = await page.evaluate(() => ({ sw: document.documentElement.scrollWidth, cw: document.documentElement.clientWidth, h: document.documentElement.scrollHeight }));
  assert.ok(size.sw <= size.cw, `page ${size.sw} px wide in a ${size.cw} px window`);
  assert.ok(size.h <= 2400, `page ${size.h} px tall for 10 runs`);
  assert.deepEqual(await cutLabelsWithoutTitle(page), []);
  // The long task name is cut somewhere (else the check above proved nothing) and its title holds it whole.
  const longCell = page.locator(`tr[data-task="${LONG}"] td.lbl`);
  assert.equal(await longCell.getAttribute('title'), LONG);
  // Grouped by task: a group row, then that task's runs, in the order given.
  const order = await page.$$eval('table[data-table="deltas"] tbody tr', (rs) => rs.map((r) => r.dataset.runRow || 'group'));
  assert.deepEqual(order, ['group', ...ids.bert, 'group', ...ids.gpt, 'group', ...ids[LONG]]);
  // Method labels: every task's energy is a counter's.
  assert.deepEqual(await page.$$eval('table[data-table="tasks"] .method', (b) => b.map((x) => x.textContent)), ['counter', 'counter', 'counter']);
  assert.equal(await page.locator('[data-note="methods-differ"]').count(), 0);
  // Phase breakdown: train and eval for every task.
  assert.deepEqual(await page.$$eval('table[data-table="cmp-phases"] tbody tr', (rs) => rs.map((r) => r.dataset.phaseName)), ['train', 'eval']);
  const c = await expectLikeCompare(page, 'bert', 'gpt');
  assert.equal(c.significant, true, 'gpt draws twice the power of bert (wide enough that the run lengths of a loaded machine cannot hide it): ' + c.verdict);
  await expectLikeCompare(page, 'bert', LONG);
  await page.screenshot({ path: join(process.env.WATTSCOPE_SCREENSHOT_DIR || dir, 'compare-report.png'), fullPage: true });
  // A run's own section is drawn when its fold is opened, charts and all.
  assert.equal(await page.locator('section[data-run]').count(), 0);
  await page.click(`details[data-run-details="${ids.gpt[0]}"] > summary`);
  await page.waitForSelector(`section[data-run="${ids.gpt[0]}"] [data-chart="gpu_power"] .scatterlayer .trace`, { state: 'attached' });
  assert.deepEqual(errors, []);
  await page.close();
});

// serve's compare view over the same store: a stable URL per selection, the verdict and figures of `wattscope
// compare`, no plotly.js (it draws no chart), back and forward between two views, and clear errors from its JSON.
test('the compare view in serve: by task and by run, back and forward, and its JSON', async () => {
  const env = { ...process.env, WATTSCOPE_NVML_LIBRARY: '/nonexistent/libnvidia-ml.so.1' };
  const { serve, base } = await startServe(WS, ['--listen', '127.0.0.1:0', '--interval', '500ms', '--db', db], { cwd: dir, env });
  try {
    const byTask = `${base}/runs/compare?tasks=bert,gpt`;
    const { page, errors } = await open(byTask);
    const c = await expectLikeCompare(page, 'bert', 'gpt');
    assert.equal(await page.getAttribute('[data-comparison]', 'data-comparison'), String(ids.bert.length + ids.gpt.length));
    assert.equal(await page.evaluate(() => typeof Plotly), 'undefined');
    const size = await page.evaluate(() => ({ sw: document.documentElement.scrollWidth, cw: document.documentElement.clientWidth, html: document.documentElement.outerHTML.length }));
    assert.ok(size.sw <= size.cw, `page ${size.sw} px wide in a ${size.cw} px window`);
    assert.ok(size.html < 200000, `page of ${size.html} bytes`);
    assert.deepEqual(await cutLabelsWithoutTitle(page), []);
    // The view links to itself (its canonical URL) and to its JSON.
    assert.equal(await page.getAttribute('a[data-link="view"]', 'href'), '/runs/compare?tasks=bert,gpt');
    assert.equal(await page.getAttribute('a[data-link="json"]', 'href'), '/api/v1/compare?tasks=bert,gpt');
    await page.screenshot({ path: join(process.env.WATTSCOPE_SCREENSHOT_DIR || dir, 'compare-serve.png'), fullPage: true });

    // Two runs by id: one run a side, so no verdict can be given, and it says why.
    const byRun = `${base}/runs/compare?runs=${ids.bert[0]},${ids.gpt[0]}`;
    await page.goto(byRun);
    await page.waitForSelector('body[data-ready="1"]');
    assert.equal(await page.getAttribute('[data-comparison]', 'data-comparison'), '2');
    assert.match(await page.innerText('li[data-verdict="task gpt"]'), /cannot tell at 95 %: each side needs at least 2 runs/);
    await page.goBack();
    await page.waitForSelector('body[data-ready="1"]');
    assert.equal(page.url(), byTask);
    assert.equal(await page.getAttribute('li[data-verdict="task gpt"]', 'data-significant'), String(c.significant));
    await page.goForward();
    await page.waitForSelector('body[data-ready="1"]');
    assert.equal(page.url(), byRun);
    assert.equal(await page.getAttribute('[data-comparison]', 'data-comparison'), '2');
    assert.deepEqual(errors, []);
    await page.close();

    // The JSON behind the view: the same comparison, and the link to the view.
    const api = await (await fetch(`${base}/api/v1/compare?tasks=bert,gpt`)).json();
    assert.equal(api.view, '/runs/compare?tasks=bert,gpt');
    assert.equal(api.comparison.verdicts[0].significant, c.significant);
    close(api.comparison.tasks[1].figures.energy_j.mean, c.b.energy_j.mean, 'API gpt energy');
    const expectError = async (q, status, re) => {
      const r = await fetch(`${base}/api/v1/compare?${q}`);
      const body = await r.json();
      assert.equal(r.status, status, `${q}: ${JSON.stringify(body)}`);
      assert.match(body.error, re, q);
    };
    await expectError('tasks=bert&tasks=gpt', 400, /'tasks' is given twice/);
    await expectError('', 400, /compare needs runs=ID,ID,\.\.\. or tasks=NAME,NAME,\.\.\./);
    await expectError('runs=' + Array.from({ length: 101 }, (_, i) => `r${i}`).join(','), 400, /more than 100 runs/);
    await expectError('tasks=no-such-task', 404, /no finished runs of task no-such-task/);
    await expectError('tasks=bert&host=elsewhere', 404, /no finished runs of task bert on host elsewhere/);
    await expectError('tasks=bert&from=2099-01-01', 404, /from 2099-01-01T00:00:00.000Z/);
    // The host and date filters keep what they match.
    const host = JSON.parse(ws(['show', '--db', db, '--json', ids.bert[0]])).host;
    const kept = await (await fetch(`${base}/api/v1/compare?tasks=bert&host=${encodeURIComponent(host)}&from=2000-01-01`)).json();
    assert.deepEqual(kept.comparison.tasks[0].runs, ids.bert);
  } finally {
    serve.kill('SIGTERM');
  }
});
