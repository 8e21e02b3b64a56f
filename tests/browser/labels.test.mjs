// Issue 29: the report's headline energy and its comparison, and the dashboard's energy so far, carry the method of
// their energy and name only the devices measured. Runs: a CPU estimate (--cpu-tdp, no RAPL under an empty
// --sysfs-root, no GPU library) and --simulate's GPUs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServe, launchChromium } from './lib.mjs';

const WS = process.env.WATTSCOPE_BINARY;
assert.ok(WS, 'WATTSCOPE_BINARY must be set (ctest sets it)');
const dir = mkdtempSync(join(tmpdir(), 'wattscope-labels-'));
mkdirSync(join(dir, 'sys'));
const env = { ...process.env, WATTSCOPE_NVML_LIBRARY: '/nonexistent/libnvidia-ml.so.1' };
delete env.CUDA_VISIBLE_DEVICES;
delete env.WATTSCOPE_FAKE_NVML_SCENARIO;
let browser;

function ws(args) {
  const r = spawnSync(WS, args, { cwd: dir, env, encoding: 'utf8' });
  assert.equal(r.status, 0, `wattscope ${args.join(' ')} failed:\n${r.stderr}`);
  return r.stdout;
}

before(async () => { browser = await launchChromium(); });
after(async () => {
  await browser?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function open(url) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  return { page, errors };
}

test('the report names the measured devices and the method of its energy, and a comparison across methods says so', async () => {
  ws(['run', '--task', 'est', '--interval', '50ms', '--cpu-tdp', '100', '--sysfs-root', join(dir, 'sys'), '--', 'sleep', '0.5']);
  const est = JSON.parse(ws(['show', '--json'])).run_id;
  ws(['run', '--task', 'sim', '--interval', '50ms', '--simulate', '--sysfs-root', join(dir, 'sys'), '--', 'sleep', '0.5']);
  const sim = JSON.parse(ws(['show', '--json'])).run_id;
  ws(['report', est, '-o', join(dir, 'est.html')]);
  let { page, errors } = await open('file://' + join(dir, 'est.html'));
  await page.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  assert.deepEqual(errors, []);
  const label = await page.textContent('.card[data-key="total_energy_j"] .label');
  assert.match(label, /CPU package/);
  assert.match(label, /estimated/);
  assert.doesNotMatch(label, /GPU|all measured devices/);
  assert.equal(await page.getAttribute('.card[data-key="total_energy_j"]', 'data-method'), 'estimated');
  assert.match(await page.textContent('.card[data-key="co2_g"] .label'), /estimated/);
  assert.equal(await page.textContent('.card[data-key="cpu.energy_j"] .label'), 'CPU package energy estimated');
  await page.close();

  ws(['report', est, sim, '-o', join(dir, 'cmp.html')]);
  ({ page, errors } = await open('file://' + join(dir, 'cmp.html')));
  await page.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  assert.deepEqual(errors, []);
  const note = await page.textContent('[data-note="methods-differ"]');
  assert.match(note, /estimated on cpu_package/);
  assert.match(note, /simulated on gpu0, gpu1, gpu2, gpu3/);
  const rows = await page.$$eval('table[data-table="deltas"] tbody tr[data-run-row]', (rs) => rs.map((r) => r.textContent));
  assert.match(rows[0], /estimated/);
  assert.match(rows[1], /simulated/);
  await page.close();
});

test('the dashboard says the method of the energy so far', async () => {
  const { serve, base } = await startServe(WS, ['--listen', '127.0.0.1:0', '--interval', '200ms', '--cpu-tdp', '80',
    '--sysfs-root', join(dir, 'sys'), '--db', join(dir, 'serve.db')], { cwd: dir, env });
  try {
    const { page, errors } = await open(base + '/');
    await page.waitForFunction(() => /Wh/.test(document.getElementById('energy').textContent), null, { timeout: 20000 });
    assert.match(await page.textContent('#energy'), /Wh \(estimated\)$/);
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    serve.kill('SIGTERM');
  }
});
