// The HTML report in a real browser (Debian's Chromium, driven by playwright-core): reports of runs with 0, 1 and 8
// GPUs and a two-run comparison open with no JavaScript error and no network request, every chart draws its traces,
// and every figure in the cards equals `wattscope show --json`. Figures set to known values read exactly as a person
// should read them (16.4 mJ/sample), and a comparison of CPU-only runs charts their stored figures.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
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

// A figure in joules as the page spells it (for 1 mJ to 1 GJ, not a whole number): 3 significant digits, SI prefix.
function joules(v) {
  const e = Math.floor(Math.log10(Math.abs(v)) / 3) * 3;
  return `${(v / 10 ** e).toPrecision(3)} ${{ [-3]: 'm', 0: '', 3: 'k', 6: 'M' }[e]}J`;
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
  // Energy per run by device: the GPUs' bars are each run's GPU energy (1 GPU and 2), as show --json has it.
  const e = cs.find((x) => x.key === 'cmp_energy');
  assert.ok(e && e.drawn === e.want, `chart cmp_energy: ${JSON.stringify(e)}`);
  const gpuBars = await page.evaluate(() => document.querySelector('[data-chart="cmp_energy"]')._fullData.find((t) => t.name === 'GPUs').y);
  const gpuSum = (show) => show.gpus.reduce((s, g) => s + g.energy_j, 0);
  assert.deepEqual(gpuBars, [gpuSum(a), gpuSum(b)]);
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
  assert.ok(row.cells[4].startsWith(joules(idle.saving_j)), `saving cell ${row.cells[4]} vs ${idle.saving_j}`);
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

// ---- figures as a person reads them: CPU-only runs (an estimate under --cpu-tdp, no RAPL under an empty
// --sysfs-root, no GPU library) with phases and work, whose stored figures are then set to known values, so that every
// string the page shows is known exactly: 3 significant digits at least, an SI prefix, a unit singular after "/".
const cpuEnv = { ...process.env, WATTSCOPE_NVML_LIBRARY: '/nonexistent/libnvidia-ml.so.1' };
delete cpuEnv.CUDA_VISIBLE_DEVICES;
delete cpuEnv.WATTSCOPE_FAKE_NVML_SCENARIO;

function sql(db, statement) {
  const r = spawnSync('sqlite3', [db, statement], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

// A CPU-only run: 0.4 s of a busy loop in an epoch of 64 samples, then an eval of 1,000 images.
function cpuRun(db, task, lr) {
  mkdirSync(join(dir, 'nosys'), { recursive: true });
  const m = `'${WS}' mark`;
  const script = `${m} model mlp --parameters 56324 --flops 4.1e9; ${m} begin epoch --index 0; timeout 0.4 sh -c 'while :; do :; done'; ` +
    `${m} work 64 samples; ${m} end epoch; ${m} begin eval; sleep 0.2; ${m} work 1000 images; ${m} end eval`;
  const r = spawnSync(WS, ['run', '--db', db, '--task', task, '--tag', `lr=${lr}`, '--interval', '50ms', '--cpu-tdp', '100',
    '--sysfs-root', join(dir, 'nosys'), '--', 'sh', '-c', script], { cwd: dir, env: cpuEnv, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(ws(['show', '--db', db, '--json']).stdout).run_id;
}

// The phases' energies, set: J per sample and J per image are then these over 64 samples and 1,000 images.
function setPhaseEnergy(db, id, epoch_j, eval_j) {
  sql(db, `UPDATE phases SET energy_j = ${epoch_j}, device_energy_j = '{"cpu_package":${epoch_j}}' WHERE run_id = '${id}' AND name = 'epoch';
           UPDATE phases SET energy_j = ${eval_j}, device_energy_j = '{"cpu_package":${eval_j}}' WHERE run_id = '${id}' AND name = 'eval';`);
}

const texts = (page, sel) => page.$$eval(sel, (es) => es.map((e) => e.textContent.trim()));

test('figures keep 3 significant digits with an SI prefix, units singular after "/"', async () => {
  const db = join(dir, 'digits.db');
  const id = cpuRun(db, 'digits', '0.0003');
  setPhaseEnergy(db, id, 0.0164 * 64, 0.0209);
  // The run's figures: 1,234,567 J in all (343 Wh), 450 W on average, 2,030 J of it its own processes'.
  sql(db, `UPDATE runs SET total_energy_j = 1234567, summary = json_set(summary,
      '$.cpu.energy_j', 1234567, '$.cpu.package_energy_j', 1234567, '$.cpu.avg_package_power_w', 450,
      '$.attribution', json('{"devices":{"cpu":{"attributed_j":2030,"other_j":0,"unattributed_j":1232537,"idle_j":0,"measured_j":1234567,"method":"attributed (estimated)"}}}'),
      '$.attributed_energy_j', 2030, '$.attributed_energy_method', 'attributed (estimated)') WHERE run_id = '${id}';`);
  const file = join(dir, 'digits.html');
  ws(['report', '--db', db, id, '-o', file, '--carbon-intensity', '475', '--energy-price', '0.15']);
  const { page, errors, requests } = await open(file);
  assert.deepEqual(errors, []);
  assert.deepEqual(requests, []);
  const card = async (key) => (await texts(page, `.card[data-key="${key}"] .value, .card[data-key="${key}"] .sub`));
  assert.deepEqual(await card('total_energy_j'), ['1.23 MJ', '343 Wh']);
  assert.deepEqual(await card('attributed_energy_j'), ['2.03 kJ', 'your processes: 2.03 kJ of 1.23 MJ total (0.164 %)']);
  assert.match(await page.textContent('.card[data-key="attributed_energy_j"] .label'), /your processes attributed \(estimated\)$/);
  // 1,234,567 J = 0.343 kWh at 475 g/kWh and 0.15 USD/kWh, the rates given to `report`, each with its source
  const [co2, co2Sub] = await card('co2_g');
  assert.equal(co2, '163 g');
  assert.match(co2Sub, /^475 gCO₂\/kWh × PUE 1 · constant 475 g\/kWh \(--carbon-intensity\)$/);
  assert.equal((await card('cost'))[0], '0.0514 USD');
  const [perSample, sampleSub] = await card('work.samples.energy_per_unit_j');
  assert.equal(perSample, '16.4 mJ/sample');
  assert.match(sampleSub, /^64 samples over 1 × epoch · \d{3} samples\/s$/); // ~150 samples/s: 3 digits
  assert.match(await page.textContent('.card[data-key="work.samples.energy_per_unit_j"] .label'), /^Energy per sample/);
  const [perImage, imageSub] = await card('work.images.energy_per_unit_j');
  assert.equal(perImage, '20.9 µJ/image');
  assert.ok(imageSub.startsWith('1,000 images over 1 × eval · '), imageSub);
  // A tag is shown as given, never as a number rounded.
  assert.match(await page.textContent('[data-meta="tags"]'), /(^|· |: )lr=0\.0003( ·|$)/);
  assert.deepEqual(await card('model.parameters'), ['56.3 k parameters', '4.10 GFLOPs']);
  // The devices table: the CPU's energy, in Wh beside it, and its mean power.
  const cpuRow = await texts(page, '[data-table="devices"] tbody tr:first-child td');
  assert.deepEqual([cpuRow[0], cpuRow[3], cpuRow[4], cpuRow[6]], ['CPU', '1.23 MJ', '343 Wh', '450 W']);
  // The phase table: each phase's energy and its J per unit.
  const phases = await page.$$eval('[data-table="phases"] tbody tr', (rs) => rs.map((r) => [...r.cells].map((c) => c.textContent)));
  // (the name cell also says how true the phase is: this run's estimated CPU is known at its ticks only)
  assert.deepEqual(phases.map((r) => [r[0].split(" (")[0], r[4], r[8]]), [['epoch', '1.05 J', '16.4 mJ/sample'], ['eval', '20.9 mJ', '20.9 µJ/image']]);
  assert.match(phases[0][0], /\(± [0-9.]+ [mµ]?J, [0-9.]+ %: edges interpolated \/ interpolated\)/);
  assert.doesNotMatch(await page.textContent('main'), /J\/samples|J\/images/);
  await page.close();
});

test('a comparison of CPU-only runs charts their energy by device and their CPU power', async () => {
  const db = join(dir, 'cpu-cmp.db');
  const a = cpuRun(db, 'lr-3e-4', '3e-4'), b = cpuRun(db, 'lr-0.02', '0.02');
  // Energy per sample of 20.9 and 17.0 mJ: two figures that once both read "0.02 J/sample".
  setPhaseEnergy(db, a, 0.0209 * 64, 0.5);
  setPhaseEnergy(db, b, 0.0170 * 64, 0.5);
  const show = Object.fromEntries([a, b].map((id) => [id, JSON.parse(ws(['show', '--db', db, '--json', id]).stdout)]));
  const file = join(dir, 'cpu-cmp.html');
  ws(['report', '--db', db, a, b, '-o', file]);
  const { page, errors, requests } = await open(file);
  assert.deepEqual(errors, []);
  assert.deepEqual(requests, []);
  const cs = await charts(page);
  for (const key of ['cmp_energy', 'cmp_cpu_power']) {
    const c = cs.find((x) => x.key === key);
    assert.ok(c, `chart ${key}: ${JSON.stringify(cs.map((x) => x.key))}`);
    assert.equal(c.drawn, c.want, key);
  }
  assert.ok(!cs.find((x) => x.key === 'cmp_power'), 'no GPU power chart without GPUs');
  // Energy per run by device: the bars are the runs' stored figures, and stack up to each run's total.
  const traces = await page.evaluate(() => document.querySelector('[data-chart="cmp_energy"]')._fullData.map((t) => ({ type: t.type, name: t.name, y: [...t.y], text: t.text })));
  const bars = traces.filter((t) => t.type === 'bar');
  assert.deepEqual(bars.map((t) => t.name), ['CPU package'], 'no GPU bars without GPUs, no DRAM under an estimate');
  assert.deepEqual(bars[0].y, [a, b].map((id) => show[id].cpu.package_energy_j));
  for (const [i, id] of [a, b].entries()) {
    const stacked = bars.reduce((s, t) => s + (t.y[i] ?? 0), 0);
    assert.ok(Math.abs(stacked - show[id].total_energy_j) <= 1e-9 * show[id].total_energy_j, `${id}: ${stacked} vs ${show[id].total_energy_j}`);
  }
  // Each run's total written over its bar, as the page spells joules.
  assert.deepEqual(traces.find((t) => t.type === 'scatter').text, [a, b].map((id) => joules(show[id].total_energy_j)));
  // CPU power over time: one line per run, its points the run's stored samples (4 significant digits in the report).
  const lines = await page.evaluate(() => document.querySelector('[data-chart="cmp_cpu_power"]')._fullData.map((t) => ({ x: [...t.x], y: [...t.y] })));
  assert.equal(lines.length, 2);
  for (const [i, id] of [a, b].entries()) {
    const start = Number(sql(db, `SELECT start_ms FROM runs WHERE run_id = '${id}';`));
    const rows = sql(db, `SELECT ts_ms, package_power_w FROM cpu_samples WHERE run_id = '${id}' AND package_power_w IS NOT NULL ORDER BY tick;`)
      .trim().split('\n').map((l) => l.split('|').map(Number));
    assert.ok(rows.length >= 5, `${id}: ${rows.length} samples`);
    assert.equal(lines[i].y.length, rows.length, `${id}: every sample plotted`);
    rows.forEach(([ts, w], k) => {
      assert.ok(Math.abs(lines[i].x[k] - (ts - start) / 1000) <= 1e-3, `${id} point ${k}: t ${lines[i].x[k]} vs ${(ts - start) / 1000}`);
      assert.ok(Math.abs(lines[i].y[k] - w) <= 5e-4 * Math.abs(w), `${id} point ${k}: ${lines[i].y[k]} W vs ${w} W`);
    });
    assert.ok(Math.max(...rows.map((r) => r[1])) > 0, `${id}: the busy loop drew power`);
  }
  // The runs table: J per sample to 3 digits, the unit singular; the tasks' means likewise.
  const perSample = await page.$$eval('[data-table="deltas"] tr[data-run-row]', (rs) => rs.map((r) => r.textContent));
  assert.ok(perSample[0].includes('20.9 mJ/sample') && perSample[1].includes('17.0 mJ/sample'), JSON.stringify(perSample));
  assert.deepEqual(await texts(page, '[data-table="tasks"] thead th:nth-last-child(1)'), ['Energy per sample, mean']);
  // The tags that tell the runs apart, as given.
  const tagCells = await page.$$eval('[data-table="deltas"] tr[data-run-row]', (rs) => rs.map((r) => r.cells[r.cells.length - 2].innerText.split('\n')));
  assert.deepEqual(tagCells, [['lr=3e-4'], ['lr=0.02']]);
  await page.close();
});
