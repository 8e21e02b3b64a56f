// The dashboard's alert banner (issue 14) in a real browser: `wattscope serve --alerts` with a fake GPU above the
// rule's threshold shows the firing alert; the page makes no JavaScript error.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServe, launchChromium } from './lib.mjs';

const WS = process.env.WATTSCOPE_BINARY;
const FAKE = process.env.WATTSCOPE_FAKE_NVML;
const dir = mkdtempSync(join(tmpdir(), 'wattscope-alerts-'));
let browser, serve, base;

before(async () => {
  const devices = [60, 95].map((temp, i) => ({
    name: 'NVIDIA H100 80GB HBM3', uuid: `GPU-${i}`,
    metrics: { power_instant_mw: 300000, energy_mj: { linear: [0, 30000] }, util_gpu: 50, mem_used_bytes: 4e10,
      mem_total_bytes: 85899345920, temp_gpu: temp, power_limit_mw: 700000 },
  }));
  writeFileSync(join(dir, 'scenario.json'), JSON.stringify({ devices }));
  writeFileSync(join(dir, 'alerts.toml'), 'builtin_rules = false\n[[rule]]\nname = "hot"\nmetric = "temp_gpu_c"\n' +
    'threshold = 85\nseverity = "critical"\nmessage = "{scope} at {value} °C <b>"\n');
  const env = { ...process.env, WATTSCOPE_NVML_LIBRARY: FAKE, WATTSCOPE_FAKE_NVML_SCENARIO: join(dir, 'scenario.json'),
    HOME: dir, XDG_CONFIG_HOME: join(dir, 'config') };
  delete env.CUDA_VISIBLE_DEVICES;
  ({ serve, base } = await startServe(WS, ['--listen', '127.0.0.1:0', '--interval', '200ms', '--alerts', join(dir, 'alerts.toml')], { cwd: dir, env }));
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  serve?.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
});

test('the banner shows the firing alert, escaped', async () => {
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // The first poll may come before the first evaluation: reload until the alert is there (polls are every 5 s).
  for (let i = 0; i < 40; i++) {
    await page.goto(base + '/');
    await page.waitForFunction(() => document.body.dataset.alerts !== undefined, null, { timeout: 10000 });
    if (Number(await page.evaluate(() => document.body.dataset.alerts)) > 0) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  assert.equal(await page.evaluate(() => document.body.dataset.alerts), '1');
  assert.equal(await page.isVisible('#alerts'), true);
  assert.equal(await page.locator('#alerts li[data-rule="hot"]').count(), 1);
  const text = await page.textContent('#alerts');
  assert.match(text, /hot · gpu1: gpu1 at 95 °C <b>/); // the message's markup is shown as text, not parsed
  assert.equal(await page.evaluate(() => document.getElementById('alerts').classList.contains('critical')), true);
  assert.deepEqual(errors, []);
});
