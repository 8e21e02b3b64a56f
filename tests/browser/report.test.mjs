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
    const svg = c.querySelectorAll('.scatterlayer .trace, .barlayer .trace, .heatmaplayer .hm').length;
    const gl = [...c.querySelectorAll('canvas.gl-canvas')].some((cv) => cv.width > 0 && cv.height > 0);
    const glTraces = (c._fullData || []).filter((t) => t.type === 'scattergl').length;
    return { key: c.dataset.chart, want, drawn: svg + (gl ? glTraces : 0) };
  }));
}

// The cards' figures and the per-device figures of the Devices table (both carry data-key and data-value).
async function cards(page) {
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('[data-key]')].map((c) => [c.dataset.key, c.dataset.value])));
}

// No legend overlaps its chart's x-axis title (issue 15: they did, legends placed just under the plot).
async function legendOverlaps(page) {
  return page.evaluate(() => {
    const bad = [];
    for (const c of document.querySelectorAll('[data-chart]')) {
      const legend = c.querySelector('.legend'), title = c.querySelector('.g-xtitle text, .xtitle');
      if (!legend || !title) continue;
      const a = legend.getBoundingClientRect(), b = title.getBoundingClientRect();
      // Sharing a line with the title is overlap enough (a wider legend would cover it), unless the legend is wholly
      // to the right of it (a vertical legend beside the plot).
      if (a.width && b.width && a.top < b.bottom && b.top < a.bottom && a.left < b.right) bad.push(c.dataset.chart);
    }
    return bad;
  });
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
    assert.deepEqual(await legendOverlaps(page), [], 'legends overlapping x-axis titles');
    // A handful of run cards, however many GPUs: per-GPU figures are in the Devices table.
    assert.ok(await page.locator('.card').count() <= 12, `${await page.locator('.card').count()} cards`);
    if (gpus > 4) {
      // Many GPUs: one heatmap row per GPU instead of a line each, and a total power line.
      const rows = await page.evaluate(() => document.querySelector('[data-chart="gpu_power"]')._fullData[0].z.length);
      assert.equal(rows, gpus);
      assert.ok(cs.find((c) => c.key === 'gpu_power_total'), 'total GPU power chart');
    }
    if (gpus) {
      const power = cs.find((c) => c.key === 'gpu_power');
      assert.equal(power.want, gpus > 4 ? 1 : gpus);
      // Registry metrics without a curated chart (the video engines) get one of their own, titled by the registry.
      for (const key of ['gpu_util_enc_pct', 'gpu_util_dec_pct']) {
        const c = cs.find((x) => x.key === key);
        assert.ok(c, `chart ${key}: ${JSON.stringify(cs.map((x) => x.key))}`);
        assert.equal(c.want, gpus > 4 ? 1 : gpus, key);
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
  const c = cs.find((x) => x.key === 'cmp_power');
  assert.ok(c, 'chart cmp_power');
  assert.equal(c.drawn, c.want, 'cmp_power');
  // issue 35: the runs grouped by task (a group row before each), energy per run in a table of tasks, not bars
  assert.equal(await page.locator('[data-table="deltas"] tbody tr[data-run-row]').count(), 2);
  assert.equal(await page.locator('[data-table="tasks"] tbody tr').count(), 2);
  assert.equal(await page.locator('section[data-run]').count(), 2);
  await page.close();
});

test('an empty run says so instead of drawing nothing', async () => {
  const show = record('will-be-emptied', 0);
  // A run row with no samples (a run whose samples never reached this store).
  // The columns named: a store's runs table may carry more (runs.j_per_unit, the runs pages' sort key).
  const sql = `INSERT INTO runs (run_id, task, command, host, cpu_model, start_ms, end_ms, duration_s, exit_status,
    interval_ms, samples, total_energy_j, tags, wattscope_version, summary)
    SELECT 'empty-run-0001', task, command, host, cpu_model, start_ms, end_ms, duration_s,
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
  assert.equal(await page.locator('[data-table="deltas"] tbody tr[data-run-row]').count(), hostile.length);
  assert.equal(await page.locator('section[data-run]').count(), hostile.length);
  const legend = await page.locator('[data-chart="cmp_power"] .legendtext').allTextContents();
  for (let i = 0; i < hostile.length; i++)
    assert.ok(legend.some((t) => t.startsWith(hostile[i].split('\u2028')[0])), `legend ${JSON.stringify(legend)} lacks ${hostile[i]}`);
  await page.close();
});

// Issue 15: a run with phases and work. Every chart of the run shows the phases as bands, the phase table lists them
// (nested ones indented) with the energy `show --json` has, and the energy-per-work card matches it too.
test('phases as bands, a phase table and energy per unit of work', async () => {
  const env = { ...process.env, WATTSCOPE_NVML_LIBRARY: FAKE, WATTSCOPE_FAKE_NVML_SCENARIO: scenario(2) };
  delete env.CUDA_VISIBLE_DEVICES;
  const db = join(dir, 'phases.db');
  const m = `'${WS}' mark`;
  const script = `${m} begin train && ${m} begin epoch --index 0 && sleep 0.3 && ${m} work 64 samples && ${m} end epoch && ` +
    `${m} begin epoch --index 1 && sleep 0.3 && ${m} work 64 samples && ${m} end epoch && ${m} end train && ${m} begin eval && sleep 0.2 && ${m} end eval`;
  const r = spawnSync(WS, ['run', '--db', db, '--task', 'phased', '--interval', '50ms', '--', 'sh', '-c', script], { cwd: dir, env, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const show = JSON.parse(ws(['show', '--db', db, '--json']).stdout);
  assert.equal(show.phases.length, 4);
  const file = join(dir, 'phases.html');
  ws(['report', '--db', db, show.run_id, '-o', file]);
  const { page, errors, requests } = await open(file);
  assert.deepEqual(errors, []);
  assert.deepEqual(requests, []);
  const bands = await page.evaluate(() => [...document.querySelectorAll('section[data-run] [data-chart]')].filter((c) => c._fullLayout)
    .map((c) => ({ key: c.dataset.chart, rects: (c._fullLayout.shapes || []).filter((s) => s.type === 'rect').length })));
  assert.ok(bands.length >= 6, JSON.stringify(bands));
  for (const b of bands) assert.equal(b.rects, 4, `chart ${b.key} shows ${b.rects} phase bands`);
  assert.equal(await page.locator('[data-table="phases"] tbody tr').count(), 4);
  const c = await cards(page);
  for (const p of show.phases) assert.ok(Math.abs(Number(c[`phase${p.phase_id}.energy_j`]) - p.energy_j) <= 1e-9 * Math.max(1, p.energy_j), `phase ${p.phase_id}`);
  assert.ok(Math.abs(Number(c['work.samples.energy_per_unit_j']) - show.work.energy_per_unit_j.samples) <= 1e-12 * Math.max(1, show.work.energy_per_unit_j.samples));
  // issue 29: the work card says which phases its figure covers, as show --json does (both epochs).
  assert.equal(show.work.covers.samples.description, '2 × epoch');
  const sub = await page.locator('[data-key="work.samples.energy_per_unit_j"] .sub').innerText();
  assert.ok(sub.includes('over 2 × epoch'), sub);
  // The nested epochs are indented under train.
  const pad = await page.evaluate(() => [...document.querySelectorAll('[data-table="phases"] td.phase')].map((td) => parseFloat(td.style.paddingLeft)));
  assert.ok(pad[1] > pad[0] && pad[2] > pad[0] && pad[3] === pad[0], JSON.stringify(pad));
  await page.close();
  // Two runs compared: energy by phase, side by side.
  const r2 = spawnSync(WS, ['run', '--db', db, '--task', 'phased', '--interval', '50ms', '--', 'sh', '-c', script], { cwd: dir, env, encoding: 'utf8' });
  assert.equal(r2.status, 0, r2.stderr);
  const second = JSON.parse(ws(['show', '--db', db, '--json']).stdout);
  const cmp = join(dir, 'phases-cmp.html');
  ws(['report', '--db', db, show.run_id, second.run_id, '-o', cmp]);
  const o = await open(cmp);
  assert.deepEqual(o.errors, []);
  assert.equal(await o.page.locator('[data-table="cmp-phases"] tbody tr').count(), 3); // train, epoch, eval
  // issue 35: each phase's energy per run, mean over the task's runs, in a table
  const mean = (n) => (show.phases.filter((p) => p.name === n).reduce((a, p) => a + p.energy_j, 0) + second.phases.filter((p) => p.name === n).reduce((a, p) => a + p.energy_j, 0)) / 2;
  const cell = await o.page.getAttribute('[data-key="phase.phased.eval.energy_j"]', 'data-value');
  assert.ok(Math.abs(Number(cell) - mean('eval')) <= 1e-9 * mean('eval'), `${cell} vs ${mean('eval')}`);
  await o.page.close();
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
  // Each point is a cell's mean power: its area is that times the cell's own width (issue 29).
  const width = (i) => P.power.edges[i + 1] - P.power.edges[i];
  const area = P.power.series.reduce((s, x) => s + x.y.reduce((a, y, i) => a + y * width(i), 0), 0);
  const energy = P.table.reduce((s, p) => s + (p.cpu_energy_j || 0) + (p.gpu_energy_j || 0), 0);
  assert.ok(P.total <= 50, 'every process is in the table, so its sum is the whole');
  assert.ok(Math.abs(area - energy) <= 0.01 * energy, `chart ${area} J vs table ${energy} J`);
  await page.close();
});

// ---- advice (issue 14): the report's Advice section shows what `show --json` has, and says so when there is none ----
test('advice: a table with each item, or a note that there is none', async () => {
  const gpu = (power_w, util, mem) => ({
    name: 'NVIDIA H100 80GB HBM3', uuid: `GPU-advice-${util}`,
    metrics: {
      power_mw: power_w * 1000, energy_mj: { sine_integral: { base: power_w * 1000, amp: 0, period_s: 1 } },
      util_gpu: util, util_mem: 30, mem_used_bytes: mem, mem_total_bytes: 85899345920, power_limit_mw: 400000,
      clock_sm: 1980, pcie_tx_kbs: 100000, pcie_rx_kbs: 400000, clock_events: 0,
    },
  });
  const run = (task, devices) => {
    const path = join(dir, `scenario-${task}.json`);
    writeFileSync(path, JSON.stringify({ devices }));
    const env = { ...process.env, WATTSCOPE_NVML_LIBRARY: FAKE, WATTSCOPE_FAKE_NVML_SCENARIO: path };
    delete env.CUDA_VISIBLE_DEVICES;
    const r = spawnSync(WS, ['run', '--task', task, '--interval', '50ms', '--', 'sleep', '1'], { cwd: dir, env, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const show = JSON.parse(ws(['show', '--json']).stdout);
    const file = join(dir, `${task}.html`);
    ws(['report', show.run_id, '-o', file]);
    return { show, file };
  };
  const busy = gpu(250, 95, 70 * 2 ** 30);
  const waste = run('advice-idle', [busy, gpu(60, 0, 2 ** 29)]);
  assert.ok(waste.show.advice.length >= 1, JSON.stringify(waste.show.advice));
  let { page, errors } = await open(waste.file);
  assert.deepEqual(errors, [], 'JavaScript errors');
  const rows = await page.evaluate(() => [...document.querySelectorAll('table[data-table="advice"] tbody tr')].map((tr) => ({
    kind: tr.dataset.advice, cells: [...tr.cells].map((c) => c.textContent) })));
  assert.deepEqual(rows.map((r) => r.kind), waste.show.advice.map((a) => a.kind));
  const idle = waste.show.advice.find((a) => a.kind === 'idle_gpu');
  const row = rows.find((r) => r.kind === 'idle_gpu');
  assert.equal(row.cells[2], 'gpu1');
  assert.ok(row.cells[4].startsWith(`${idle.saving_j.toLocaleString('en-US', { minimumFractionDigits: 1, maximumFractionDigits: 1 })} J`), `saving cell ${row.cells[4]} vs ${idle.saving_j}`);
  assert.equal(row.cells[6], idle.text);
  await page.close();

  const healthy = run('advice-healthy', [busy]);
  assert.deepEqual(healthy.show.advice, []);
  ({ page, errors } = await open(healthy.file));
  assert.deepEqual(errors, [], 'JavaScript errors');
  assert.equal(await page.locator('[data-advice="none"]').count(), 1);
  assert.equal(await page.locator('table[data-table="advice"]').count(), 0);
  await page.close();
});
// ---- end advice ----
