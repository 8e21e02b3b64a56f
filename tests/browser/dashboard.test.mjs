// The live dashboard in a real browser: `wattscope serve` with fake GPUs, two tabs open at once, each receiving
// live updates over server-sent events, with no JavaScript error and no request beyond the server itself.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServe, launchChromium } from './lib.mjs';

const WS = process.env.WATTSCOPE_BINARY;
const FAKE = process.env.WATTSCOPE_FAKE_NVML;
const dir = mkdtempSync(join(tmpdir(), 'wattscope-dash-'));
let browser, serve, base;

before(async () => {
  const devices = [0, 1, 2].map((i) => ({
    name: 'NVIDIA H100 80GB HBM3', uuid: `GPU-${i}`,
    metrics: { power_instant_mw: { sine: { base: 300000, amp: 100000, period_s: 2 } }, energy_mj: { linear: [0, 30000] },
      util_gpu: { linear: [10, 1] }, util_mem: 30, mem_used_bytes: 4e10, mem_total_bytes: 85899345920, temp_gpu: [60, 82, 90][i], power_limit_mw: 700000 },
  }));
  writeFileSync(join(dir, 'scenario.json'), JSON.stringify({ devices }));
  const env = { ...process.env, WATTSCOPE_NVML_LIBRARY: FAKE, WATTSCOPE_FAKE_NVML_SCENARIO: join(dir, 'scenario.json') };
  delete env.CUDA_VISIBLE_DEVICES;
  ({ serve, base } = await startServe(WS, ['--listen', '127.0.0.1:0', '--interval', '200ms'], { cwd: dir, env }));
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  serve?.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
});

async function open() {
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
  const errors = [], foreign = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('request', (r) => { if (!r.url().startsWith(base)) foreign.push(r.url()); });
  await page.goto(base + '/');
  return { page, errors, foreign };
}

test('two dashboards receive live updates', async () => {
  const a = await open();
  const b = await open();
  for (const t of [a, b]) {
    await t.page.waitForFunction(() => Number(document.body.dataset.updates || 0) >= 3, null, { timeout: 20000 });
    // The charts are drawn once plotly.js is in (after the page's first frame).
    await t.page.waitForFunction(() => Number(document.body.dataset.charts || 0) >= 1, null, { timeout: 20000 });
    assert.deepEqual(t.errors, []);
    assert.deepEqual(t.foreign, []);
    assert.equal(await t.page.locator('.gpu[data-gpu]').count(), 3);
    assert.match(await t.page.textContent('#status'), /live/);
    const traces = await t.page.evaluate(() => document.getElementById('power')._fullData.length);
    assert.equal(traces, 3);
  }
  // Threshold colours (warn from 80 °C, red from 88 °C): 60, 82 and 90 °C.
  const classes = await a.page.evaluate(() => [...document.querySelectorAll('.gpu[data-gpu]')].map((g) => g.children[3].className));
  assert.deepEqual(classes, ['ok', 'warn', 'bad']);
  // The history switch redraws without an error and keeps streaming.
  await a.page.click('button[data-range="6h"]');
  const before = Number(await a.page.evaluate(() => document.body.dataset.updates));
  await a.page.waitForFunction((n) => Number(document.body.dataset.updates) >= n + 2, before, { timeout: 20000 });
  assert.deepEqual(a.errors, []);
  await a.page.screenshot({ path: join(process.env.WATTSCOPE_SCREENSHOT_DIR || dir, 'dashboard.png') });
});

// ---- advice (issue 14): the dashboard's Advice section shows what /api/v1/advice answered ----
test('the advice section renders the server\'s advice', async () => {
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // Every answer the page got: it polls every 15 s, and on a loaded machine the table read below may be a later
  // poll's (the server recomputes its advice every 10 s), so the table must be one of the answers, rendered whole.
  const answers = [];
  page.on('response', (r) => { if (r.url() === base + '/api/v1/advice') answers.push(r.json()); });
  await page.goto(base + '/');
  await page.waitForFunction(() => document.body.dataset.advice !== undefined || document.body.dataset.adviceError !== undefined, null, { timeout: 60000, polling: 250 });
  assert.equal(await page.evaluate(() => document.body.dataset.adviceError), undefined, 'the advice section failed');
  const rows = await page.evaluate(() => [...document.querySelectorAll('#advice tr[data-advice]')].map((tr) => ({
    kind: tr.dataset.advice, text: tr.cells[4].textContent })));
  const bodies = await Promise.all(answers);
  assert.ok(bodies.length >= 1, 'the page asked for no advice');
  const rendered = bodies.map((b) => b.advice.map((a) => ({ kind: a.kind, text: a.text })));
  if (!rendered.some((want) => JSON.stringify(want) === JSON.stringify(rows)))
    assert.deepEqual(rows, rendered[rendered.length - 1]); // says how the table differs from the latest answer
  if (!rows.length) assert.match(await page.textContent('#advice'), /none/);
  assert.deepEqual(errors, []);
  await page.close();
});
// ---- end advice ----
