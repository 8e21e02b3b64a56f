// --simulate in a real browser (issue 19), and the gallery: a simulated run's HTML report and `serve --simulate`'s
// live dashboard, each checked for its SIMULATED banner (visible, in words) and for no script error, then
// photographed. The PNGs go to WATTSCOPE_GALLERY_DIR when set (scripts/gallery.sh sets it to docs/), else into this
// test's own temporary directory: the test writes nowhere else.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { startServe, launchChromium } from './lib.mjs';

const WS = process.env.WATTSCOPE_BINARY;
const dir = mkdtempSync(join(tmpdir(), 'wattscope-sim-'));
const gallery = process.env.WATTSCOPE_GALLERY_DIR || dir;
// A machine without a GPU: no NVML to find, and a real-GPU variable that must not pick among simulated ones.
const env = { ...process.env, WATTSCOPE_NVML_LIBRARY: '/nonexistent/libnvidia-ml.so.1', CUDA_VISIBLE_DEVICES: '0' };
delete env.WATTSCOPE_FAKE_NVML_SCENARIO;
delete env.WATTSCOPE_SOCKET;
let browser, serve, base, recorded, dash;

function exited(child) {
  return new Promise((resolve) => child.on('exit', (code) => resolve(code)));
}

before(async () => {
  // serve starts first; the run follows once the dashboard is open, so both pictures show the same 20 s.
  ({ serve, base } = await startServe(WS, ['--simulate', '--listen', '127.0.0.1:0', '--interval', '250ms', '--task', 'training'], { cwd: dir, env }));
  browser = await launchChromium();
  // The dashboard is open from the start, so it draws the run's 20 s from live updates (one point a tick).
  dash = await page_at(base + '/');
  // 19.5 s: one whole pass of the built-in scenario (warm-up, three epochs, two evaluations).
  const run = spawn(WS, ['run', '--simulate', '--task', 'bert-finetune', '--interval', '250ms', '--report', join(dir, 'report.html'), '--', 'sleep', '19.5'], { cwd: dir, env });
  let runErr = '';
  run.stderr.on('data', (d) => { runErr += d; });
  recorded = { code: await exited(run), err: runErr };
});

after(async () => {
  await browser?.close();
  serve?.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
});

async function page_at(url) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(url);
  return { page, errors };
}

test('the report of a simulated run says SIMULATED in a visible banner and on its GPU charts', async () => {
  assert.equal(recorded.code, 0, recorded.err);
  const { page, errors } = await page_at(pathToFileURL(join(dir, 'report.html')).href);
  await page.waitForFunction(() => document.body.dataset.ready === '1', null, { timeout: 60000 });
  assert.deepEqual(errors, []);
  const banner = page.locator('#ws-simulated');
  assert.ok(await banner.isVisible());
  assert.match(await banner.textContent(), /^SIMULATED GPUs \(wattscope --simulate, scenario training \(built-in\)\): every GPU figure/);
  assert.match(await page.textContent('#title'), /simulated GPUs/);
  // Every GPU chart's title, and the cards a simulated GPU is part of, carry the word.
  const titles = await page.evaluate(() => [...document.querySelectorAll('[data-chart^="gpu"]')].filter((d) => d._fullLayout).map((d) => d._fullLayout.title.text));
  assert.ok(titles.length >= 5, String(titles));
  for (const t of titles) assert.match(t, /SIMULATED/);
  for (const key of ['total_energy_j', 'gpus.avg_power_w', 'gpus.avg_util_pct'])
    assert.match(await page.textContent(`.card[data-key="${key}"] .label`), /simulated/);
  assert.match(await page.textContent('.card[data-key="gpus.energy_j"] .label'), /simulated/);
  // The phases the scenario's timeline sent, each labelled simulated.
  const phases = await page.$$eval('table[data-table="phases"] tbody tr', (rows) => rows.map((r) => r.textContent));
  assert.ok(phases.length >= 5, String(phases));
  for (const p of phases) assert.match(p, /simulated/);
  await page.screenshot({ path: join(gallery, 'report-simulated.png') });
  assert.ok(statSync(join(gallery, 'report-simulated.png')).size > 10000);
});

test('the dashboard of serve --simulate says SIMULATED in a visible banner', async () => {
  const { page, errors } = dash;
  // It was opened first and may be in the background: brought to the front, and polled on a timer (a background page
  // gets no animation frames, which waitForFunction polls on by default).
  await page.bringToFront();
  await page.waitForFunction(() => Number(document.body.dataset.updates || 0) >= 4, null, { timeout: 30000, polling: 250 });
  assert.deepEqual(errors, []);
  const banner = page.locator('#simulated');
  assert.ok(await banner.isVisible());
  assert.match(await banner.textContent(), /^SIMULATED GPUs \(wattscope serve --simulate, scenario training \(built-in\)\)/);
  assert.equal(await page.locator('.gpu[data-gpu]').count(), 4);
  for (const h of await page.$$eval('.gpu[data-gpu] h3', (hs) => hs.map((x) => x.textContent))) assert.match(h, /simulated/);
  assert.match(await page.textContent('#energy'), /simulated/);
  const title = await page.evaluate(() => document.getElementById('power')._fullLayout.title.text);
  assert.match(title, /SIMULATED/);
  await page.screenshot({ path: join(gallery, 'dashboard-simulated.png') });
  assert.ok(existsSync(join(gallery, 'dashboard-simulated.png')));
});

// `top --simulate --once` at 100x34, drawn as a terminal would (its plain-text frame in a monospace page), for the
// README's picture of top. The frame must say SIMULATED, and show the scenario's four GPUs.
test('top --simulate: the frame says so, and its picture', async () => {
  const frame = execFileSync(WS, ['top', '--simulate', '--once', '--sort', 'cpu'],
    { cwd: dir, env: { ...env, COLUMNS: '100', LINES: '34', TERM: 'dumb' }, encoding: 'utf8', timeout: 60000 });
  assert.match(frame, /SIMULATED GPUs, not measurements/);
  assert.equal((frame.match(/^ [0-3] /gm) || []).length, 4, frame);
  assert.doesNotMatch(frame, /\(simulated\) \(simulated\)/);
  const page = await browser.newPage({ viewport: { width: 1000, height: 640 } });
  await page.setContent('<body style="margin:0;background:#111"><pre id="t" style="margin:12px;color:#ddd;' +
    'font:14px/1.3 DejaVu Sans Mono,monospace"></pre></body>');
  await page.evaluate((t) => { document.getElementById('t').textContent = t; }, frame);
  await page.screenshot({ path: join(gallery, 'top-simulated.png') });
  assert.ok(existsSync(join(gallery, 'top-simulated.png')));
  await page.close();
});
