// The HTML report in a real browser (Debian's Chromium, driven by playwright-core): reports of runs with 0, 1 and 8
// GPUs and a two-run comparison open with no JavaScript error and no network request, every chart draws its traces,
// and every figure in the cards equals `wattscope show --json`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const WS = process.env.WATTSCOPE_BINARY;
const FAKE = process.env.WATTSCOPE_FAKE_NVML;
const CHROMIUM = process.env.WATTSCOPE_CHROMIUM || '/usr/bin/chromium';
assert.ok(WS && FAKE, 'WATTSCOPE_BINARY and WATTSCOPE_FAKE_NVML must be set (ctest sets them)');

const dir = mkdtempSync(join(tmpdir(), 'wattscope-browser-'));
let browser;

function scenario(n) {
  const devices = [];
  for (let i = 0; i < n; i++) {
    devices.push({
      name: 'NVIDIA H100 80GB HBM3', uuid: `GPU-${i}-test`,
      metrics: {
        power_instant_mw: { sine: { base: 300000 + 10000 * i, amp: 80000, period_s: 0.7 } },
        energy_mj: { sine_integral: { base: 300000 + 10000 * i, amp: 80000, period_s: 0.7 } },
        util_gpu: { linear: [10 + i, 3] }, util_mem: 40, mem_used_bytes: { linear: [1e9, 1e8] },
        mem_total_bytes: 85899345920, temp_gpu: 60 + i, temp_mem: 70, clock_sm: 1980, clock_mem: 2619,
        pcie_width: 16, pcie_tx_kbs: 1000, pcie_rx_kbs: 2000, util_enc: { linear: [5, 1] }, util_dec: 12,
      },
    });
  }
  const path = join(dir, `scenario${n}.json`);
  writeFileSync(path, JSON.stringify({ devices }));
  return path;
}

function ws(args, env = {}) {
  const r = spawnSync(WS, args, { cwd: dir, env: { ...process.env, ...env }, encoding: 'utf8' });
  assert.equal(r.status, 0, `wattscope ${args.join(' ')} failed:\n${r.stderr}`);
  return r;
}

function record(task, gpus) {
  const env = { ...process.env };
  delete env.CUDA_VISIBLE_DEVICES;  // the fake GPUs, all of them
  if (gpus) Object.assign(env, { WATTSCOPE_NVML_LIBRARY: FAKE, WATTSCOPE_FAKE_NVML_SCENARIO: scenario(gpus) });
  else env.WATTSCOPE_NVML_LIBRARY = '/nonexistent/libnvidia-ml.so.1';
  const r = spawnSync(WS, ['run', '--task', task, '--interval', '50ms', '--', 'sleep', '1'], { cwd: dir, env, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(ws(['show', '--json']).stdout);
}

async function open(file) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [], requests = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith('file:') || url.startsWith('data:') || url.startsWith('blob:')) return route.continue();
    requests.push(url);
    return route.abort();
  });
  await page.goto('file://' + file);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  return { page, errors, requests };
}

// Every chart that has traces drew them: SVG trace groups, or a sized WebGL canvas for scattergl.
async function charts(page) {
  return page.evaluate(() => [...document.querySelectorAll('[data-chart]')].map((c) => {
    const want = Number(c.dataset.traces);
    const svg = c.querySelectorAll('.scatterlayer .trace, .barlayer .trace').length;
    const gl = [...c.querySelectorAll('canvas.gl-canvas')].some((cv) => cv.width > 0 && cv.height > 0);
    const glTraces = (c._fullData || []).filter((t) => t.type === 'scattergl').length;
    return { key: c.dataset.chart, want, drawn: svg + (gl ? glTraces : 0) };
  }));
}

async function cards(page) {
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('.card')].map((c) => [c.dataset.key, c.dataset.value])));
}

function expectCardsMatch(c, show) {
  const close = (key, expected) => {
    assert.ok(key in c, `card ${key} is missing`);
    if (expected === null || expected === undefined) return assert.equal(c[key], '', key);
    assert.ok(Math.abs(Number(c[key]) - expected) <= 1e-9 * Math.max(1, Math.abs(expected)), `${key}: card ${c[key]} vs show ${expected}`);
  };
  close('duration_s', show.duration_s);
  close('total_energy_j', show.total_energy_j);
  close('cpu.avg_util_pct', show.cpu.avg_util_pct);
  close('cpu.peak_mem_used_bytes', show.cpu.peak_mem_used_bytes);
  for (const g of show.gpus) {
    close(`gpu${g.index}.energy_j`, g.energy_j);
    close(`gpu${g.index}.avg_power_w`, g.avg_power_w);
    close(`gpu${g.index}.avg_util_pct`, g.avg_util_pct);
    close(`gpu${g.index}.peak_mem_used_bytes`, g.peak_mem_used_bytes);
  }
}

before(async () => {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
});
after(async () => { await browser?.close(); rmSync(dir, { recursive: true, force: true }); });

for (const gpus of [0, 1, 8]) {
  test(`report of a run with ${gpus} GPU(s)`, async () => {
    const show = record(`gpus${gpus}`, gpus);
    const file = join(dir, `r${gpus}.html`);
    ws(['report', show.run_id, '-o', file]);
    const { page, errors, requests } = await open(file);
    assert.deepEqual(errors, [], 'JavaScript errors');
    assert.deepEqual(requests, [], 'network requests');
    const cs = await charts(page);
    assert.ok(cs.length >= (gpus ? 8 : 2), `charts: ${JSON.stringify(cs)}`);
    for (const c of cs) assert.equal(c.drawn, c.want, `chart ${c.key} drew ${c.drawn} of ${c.want} traces`);
    if (gpus) {
      const power = cs.find((c) => c.key === 'gpu_power');
      assert.equal(power.want, gpus);
      // Registry metrics without a curated chart (the video engines) get one of their own, titled by the registry.
      for (const key of ['gpu_util_enc_pct', 'gpu_util_dec_pct']) {
        const c = cs.find((x) => x.key === key);
        assert.ok(c, `chart ${key}: ${JSON.stringify(cs.map((x) => x.key))}`);
        assert.equal(c.want, gpus, key);
      }
      assert.match(await page.textContent('[data-chart="gpu_util_enc_pct"]'), /Encoder utilisation/);
    } else {
      assert.match(await page.textContent('main'), /No GPU was recorded in this run/);
    }
    expectCardsMatch(await cards(page), show);
    if (gpus === 8) await page.screenshot({ path: join(process.env.WATTSCOPE_SCREENSHOT_DIR || dir, 'report-8gpu.png'), fullPage: true });
    await page.close();
  });
}

test('two runs compared', async () => {
  const a = record('baseline', 1);
  const b = record('tuned', 2);
  const file = join(dir, 'cmp.html');
  ws(['report', a.run_id, b.run_id, '-o', file]);
  const { page, errors, requests } = await open(file);
  assert.deepEqual(errors, []);
  assert.deepEqual(requests, []);
  assert.equal(await page.getAttribute('[data-comparison]', 'data-comparison'), '2');
  const cs = await charts(page);
  for (const key of ['cmp_power', 'cmp_energy', 'cmp_duration', 'cmp_avg_power']) {
    const c = cs.find((x) => x.key === key);
    assert.ok(c, `chart ${key}`);
    assert.equal(c.drawn, c.want, key);
  }
  assert.equal(await page.locator('[data-table="deltas"] tbody tr').count(), 2);
  assert.equal(await page.locator('section[data-run]').count(), 2);
  await page.close();
});

test('an empty run says so instead of drawing nothing', async () => {
  const show = record('will-be-emptied', 0);
  // A run row with no samples (a run whose samples never reached this store).
  const sql = `INSERT INTO runs SELECT 'empty-run-0001', task, command, host, cpu_model, start_ms, end_ms, duration_s,
    exit_status, interval_ms, 0, NULL, tags, wattscope_version, '{}' FROM runs WHERE run_id = '${show.run_id}';`;
  const r = spawnSync('sqlite3', [join(dir, 'wattscope.db'), sql], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const file = join(dir, 'empty.html');
  ws(['report', 'empty-run-0001', '-o', file]);
  const { page, errors } = await open(file);
  assert.deepEqual(errors, []);
  assert.match(await page.textContent('main'), /This run has no samples/);
  await page.close();
});

// Task names, tags, commands and stored strings are data: none can end the data block, comment the page out, or
// run script, in a single-run report or a comparison.
test('hostile strings stay text', async () => {
  const hostile = ['<!--<script>', '</script><script>window.__pwned = 1</script>', '<img src=x onerror="window.__pwned = 2">&amp;\u2028'];
  const env = { ...process.env, WATTSCOPE_NVML_LIBRARY: FAKE, WATTSCOPE_FAKE_NVML_SCENARIO: scenario(1) };
  delete env.CUDA_VISIBLE_DEVICES;
  const db = join(dir, 'hostile.db');
  const ids = [];
  for (const s of hostile) {
    const r = spawnSync(WS, ['run', '--db', db, '--task', s, '--tag', `k=${s}`, '--interval', '50ms', '--', 'sh', '-c', 'sleep 0.5', s], { cwd: dir, env, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    ids.push(JSON.parse(ws(['show', '--db', db, '--json']).stdout).run_id);
  }
  // A store edited by hand is input too: an energy method the report shows as a badge.
  const sql = `UPDATE runs SET summary = json_set(summary, '$.gpus[0].energy_method', '<img src=x onerror="window.__pwned = 3">') WHERE run_id = '${ids[2]}';`;
  const q = spawnSync('sqlite3', [db, sql], { encoding: 'utf8' });
  assert.equal(q.status, 0, q.stderr);
  for (let i = 0; i < hostile.length; i++) {
    const file = join(dir, `hostile${i}.html`);
    ws(['report', '--db', db, ids[i], '-o', file]);
    const { page, errors } = await open(file);
    assert.deepEqual(errors, [], `report of task ${JSON.stringify(hostile[i])}`);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    assert.equal(await page.textContent('#title'), `${hostile[i]} · energy and performance`);
    assert.ok((await page.textContent('#meta code')).includes(hostile[i]), 'the command, hostile argument included');
    assert.ok((await charts(page)).length >= 8);
    await page.close();
  }
  const file = join(dir, 'hostile-cmp.html');
  ws(['report', '--db', db, ...ids, '-o', file]);
  const { page, errors } = await open(file);
  assert.deepEqual(errors, []);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  assert.equal(await page.locator('[data-table="deltas"] tbody tr').count(), hostile.length);
  assert.equal(await page.locator('section[data-run]').count(), hostile.length);
  const legend = await page.locator('[data-chart="cmp_power"] .legendtext').allTextContents();
  for (let i = 0; i < hostile.length; i++)
    assert.ok(legend.some((t) => t.startsWith(hostile[i].split('\u2028')[0])), `legend ${JSON.stringify(legend)} lacks ${hostile[i]}`);
  await page.close();
});

// Attribution (issue 13): a run of a dozen processes, one of them on a GPU, gets a processes table and a stacked chart
// of power by process (the 8 largest and "other") whose areas add up to the table's energy.
test('processes: a table, and power stacked by process with the rest as other', async () => {
  const pidFile = join(dir, 'gpu-worker.pid');
  const scen = join(dir, 'scenario-procs.json');
  writeFileSync(scen, JSON.stringify({ devices: [{
    name: 'NVIDIA H100', uuid: 'GPU-procs',
    metrics: { power_instant_mw: 300000, energy_mj: { linear: [1000, 15000] }, mem_used_bytes: 2e9, mem_total_bytes: 85899345920 },
    processes: [{ pid_file: pidFile, sm: 50, mem_bytes: 2e9 }],
  }] }));
  const env = { ...process.env, WATTSCOPE_NVML_LIBRARY: FAKE, WATTSCOPE_FAKE_NVML_SCENARIO: scen };
  delete env.CUDA_VISIBLE_DEVICES;
  const db = join(dir, 'procs.db');
  // Ten busy shells, and a sleeper that NVML lists on the GPU. --cpu-tdp: CPU energy (estimated) where RAPL is absent.
  const script = `sleep 2.6 & echo $! > ${pidFile}; for i in 1 2 3 4 5 6 7 8 9 10; do (n=0; end=$(($(date +%s) + 2)); while [ $(date +%s) -lt $end ]; do n=$((n+1)); done) & done; wait`;
  const r = spawnSync(WS, ['run', '--db', db, '--task', 'procs', '--cpu-tdp', '100', '--interval', '100ms', '--', 'sh', '-c', script], { cwd: dir, env, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const show = JSON.parse(ws(['show', '--db', db, '--json']).stdout);
  const file = join(dir, 'procs.html');
  ws(['report', '--db', db, show.run_id, '-o', file]);
  const { page, errors, requests } = await open(file);
  assert.deepEqual(errors, []);
  assert.deepEqual(requests, []);
  const rows = await page.locator('[data-table="processes"] tbody tr').count();
  assert.ok(rows >= 11, `processes table rows: ${rows}`);
  const P = await page.evaluate(() => JSON.parse(document.getElementById('ws-data').textContent).runs[0].processes);
  const gpuRow = P.table.find((p) => p.comm === 'sleep' && p.gpu_energy_j > 0);
  assert.ok(gpuRow, `the GPU worker has GPU energy: ${JSON.stringify(P.table.slice(0, 3))}`);
  const cs = await charts(page);
  const c = cs.find((x) => x.key === 'process_power');
  assert.ok(c, `chart process_power: ${JSON.stringify(cs.map((x) => x.key))}`);
  assert.equal(c.want, 9, 'the 8 largest processes and other');
  assert.equal(c.drawn, c.want);
  assert.match(P.power.series[8].name, /^other \(\d+ processes\)$/);
  // The stacked areas integrate to the processes' energy (values are rounded to 4 significant digits).
  const area = P.power.series.reduce((s, x) => s + x.y.reduce((a, y) => a + y, 0) * P.power.step_s, 0);
  const energy = P.table.reduce((s, p) => s + p.cpu_energy_j + (p.gpu_energy_j || 0), 0);
  assert.ok(P.total <= 50, 'every process is in the table, so its sum is the whole');
  assert.ok(Math.abs(area - energy) <= 0.01 * energy, `chart ${area} J vs table ${energy} J`);
  await page.close();
});
