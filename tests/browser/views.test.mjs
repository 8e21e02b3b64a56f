// The browser views a team lives in, as a team uses them: a store with two finished runs (one of a Slurm job) and one
// whose recorder was killed with SIGKILL, browsed by `serve --db` (read only) in Chromium at desktop and phone sizes.
// Each page: the killed run's figures rebuilt from its samples and said to be, the navigation between pages, sorting
// and paging by keyboard, zero serious or critical axe-core violations, no sideways scroll at 390 px, the page drawn
// before plotly.js is asked for, and the CSV export and totals of the filtered runs agreeing with the API. First
// paints are printed (performance is measured in bench/, not asserted here). About 40 s.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServe, launchChromium } from './lib.mjs';

const WS = process.env.WATTSCOPE_BINARY;
const FAKE = process.env.WATTSCOPE_FAKE_NVML;
assert.ok(WS && FAKE, 'WATTSCOPE_BINARY and WATTSCOPE_FAKE_NVML must be set (ctest sets them)');
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

const dir = mkdtempSync(join(tmpdir(), 'wattscope-views-'));
const db = join(dir, 'runs.db');
let browser, serve, base, killed;
const finished = [];

function env() {
  const e = { ...process.env, WATTSCOPE_NVML_LIBRARY: FAKE, WATTSCOPE_FAKE_NVML_SCENARIO: join(dir, 'scenario.json'),
    WATTSCOPE_CGROUP_ROOT: 'none' };
  delete e.CUDA_VISIBLE_DEVICES;
  return e;
}
const ws = (...args) => {
  const r = spawnSync(WS, args, { cwd: dir, env: env(), encoding: 'utf8' });
  assert.equal(r.status, 0, `wattscope ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
};
const runs = () => JSON.parse(ws('list', '--db', db, '--json'));

before(async () => {
  writeFileSync(join(dir, 'scenario.json'), JSON.stringify({ devices: [0, 1].map((i) => ({
    name: 'NVIDIA H100 80GB HBM3', uuid: `GPU-views-${i}`, pci_bus_id: `00000000:1${i}:00.0`,
    metrics: { power_mw: 200000 + 100000 * i, energy_mj: { linear: [1000000, 10000 + 5000 * i] }, util_gpu: 70,
      util_mem: 20, temp_gpu: 60 + 25 * i, mem_used_bytes: 2e9, mem_total_bytes: 85899345920 } })) }));
  ws('run', '--db', db, '--task', 'train', '--interval', '100ms', '--tag', 'slurm_job_id=77', '--', 'sleep', '0.6');
  ws('run', '--db', db, '--task', 'eval', '--interval', '100ms', '--', 'sleep', '0.4');
  for (const r of runs()) finished.push(r.run_id);
  // A recorder killed mid-run: no end, no summary, only its samples.
  const rec = spawn(WS, ['run', '--db', db, '--task', 'killed', '--interval', '100ms', '--', 'sleep', '60'],
    { cwd: dir, env: env(), stdio: 'ignore' });
  const deadline = Date.now() + 20000;
  for (;;) {
    const k = runs().find((r) => r.task === 'killed');
    if (k && k.samples >= 5) { killed = k.run_id; break; }
    assert.ok(Date.now() < deadline, 'the recorder stored no samples');
    await new Promise((r) => setTimeout(r, 100));
  }
  rec.kill('SIGKILL');
  await new Promise((r) => rec.once('exit', r));
  ({ serve, base } = await startServe(WS, ['--listen', '127.0.0.1:0', '--interval', '200ms', '--db', db],
    { cwd: dir, env: env() }));
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  if (serve) {
    const gone = new Promise((r) => serve.once('exit', r));
    serve.kill('SIGTERM');
    await gone;
  }
  rmSync(dir, { recursive: true, force: true });
});

async function open(path, width = 1280) {
  const context = await browser.newContext({ viewport: { width, height: 860 }, bypassCSP: true }); // axe is injected
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error' && !/404/.test(m.text())) errors.push(m.text()); });
  const response = await page.goto(base + path);
  return { page, errors, response, close: () => context.close() };
}

// The page's serious and critical axe-core violations, named with their first elements.
async function axe(page) {
  await page.addScriptTag({ content: AXE });
  const r = await page.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
}

const ready = {
  '/': (p) => p.waitForFunction(() => Number(document.body.dataset.charts || 0) >= 1 && Number(document.body.dataset.updates || 0) >= 1, null, { timeout: 20000 }),
  '/runs': (p) => p.waitForFunction(() => document.body.dataset.loaded !== undefined, null, { timeout: 20000 }),
  run: (p) => p.waitForFunction(() => document.body.dataset.ready === '1', null, { timeout: 20000 }),
  job: (p) => p.waitForFunction(() => document.body.dataset.loaded === '1', null, { timeout: 20000 }),
};

test('a killed run shows its figures rebuilt from its samples, and says so, in every view', async () => {
  const shown = JSON.parse(ws('show', killed, '--db', db, '--json'));
  assert.ok(shown.samples >= 5 && shown.total_energy_j > 0, JSON.stringify(shown).slice(0, 300));
  const api = await (await fetch(`${base}/api/v1/runs?q=${killed}`)).json();
  const one = await (await fetch(`${base}/api/v1/runs/${killed}`)).json();
  for (const r of [api[0], one]) {
    assert.equal(r.unfinished, true);
    assert.equal(r.rebuilt_from_samples, true);
    assert.equal(r.samples, shown.samples);
    assert.equal(r.total_energy_j, shown.total_energy_j);
    assert.equal(r.energy_method, shown.energy_method);
  }
  const list = await open('/runs?task=killed');
  await ready['/runs'](list.page);
  const cells = await list.page.$$eval(`#run-${killed} td`, (tds) => tds.map((td) => td.textContent));
  assert.ok(cells.includes('unfinished'), cells.join(' | '));
  assert.ok(cells.some((c) => /J/.test(c) && /rebuilt from samples/.test(c)), cells.join(' | '));
  await list.close();

  const run = await open(`/runs/${killed}`);
  await ready.run(run.page);
  assert.match(await run.page.textContent('[data-note=unfinished]'), /Unfinished run.*rebuilt from samples/s);
  assert.equal(Number(await run.page.getAttribute('.card[data-key=total_energy_j]', 'data-value')), shown.total_energy_j);
  assert.match(await run.page.textContent('.card[data-key=duration_s]'), new RegExp(`to its last sample.*${shown.samples} samples`, 's'));
  assert.deepEqual(run.errors, []);
  await run.close();
});

test('every page links the others; a run page links its place in the list and its Slurm job', async () => {
  const train = runs().find((r) => r.task === 'train').run_id;
  for (const path of ['/', '/runs', `/runs/${train}`, '/jobs/77', `/runs/compare?runs=${finished.join(',')}`, '/runs/nope']) {
    const { page, close } = await open(path);
    await page.waitForSelector('nav[aria-label=wattscope] a[href="/runs"]', { state: 'visible', timeout: 20000 })
      .catch((e) => assert.fail(`${path}: no navigation to the runs (${e.message.split('\n')[0]})`));
    assert.ok(await page.$('nav[aria-label=wattscope] a[href="/"]'), `${path}: a link to the dashboard`);
    await close();
  }
  const { page, errors, close } = await open(`/runs/${train}`);
  await ready.run(page);
  assert.equal(await page.getAttribute('[data-link=job]', 'href'), '/jobs/77');
  const listed = await page.getAttribute('[data-link=list]', 'href');
  assert.equal(listed, `/runs#run-${train}`);
  await Promise.all([page.waitForNavigation(), page.click('[data-link=list]')]);
  await ready['/runs'](page);
  assert.equal(await page.getAttribute(`#run-${train}`, 'aria-current'), 'true', 'the run is marked in the list');
  assert.deepEqual(errors, []);
  await close();
  // The compare page's run ids are links to the runs.
  const cmp = await open(`/runs/compare?runs=${finished.join(',')}`);
  await cmp.page.waitForFunction(() => document.body.dataset.ready === '1', null, { timeout: 20000 });
  for (const id of finished) assert.ok(await cmp.page.$(`a[href="/runs/${id}"]`), `the compare page links ${id}`);
  await cmp.close();
});

test('sorting and paging by keyboard, a skip link first', async () => {
  const { page, errors, close } = await open('/runs?limit=25');
  await ready['/runs'](page);
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.className), 'skip');
  let loaded = await page.evaluate(() => document.body.dataset.loaded);
  await page.focus('th[data-sort=energy] button');
  await page.keyboard.press('Enter');
  await page.waitForFunction((n) => document.body.dataset.loaded !== n, loaded);
  assert.match(page.url(), /sort=-energy/);
  assert.equal(await page.getAttribute('th[data-sort=energy]', 'aria-sort'), 'descending');
  const energies = await page.$$eval('#runs tbody tr', (trs) => trs.map((tr) => tr.dataset.run));
  assert.equal(energies.length, 3);
  assert.deepEqual(errors, []);
  await close();
});

test('no serious accessibility violation, no sideways scroll on a phone, the page drawn before plotly.js', async () => {
  const train = runs().find((r) => r.task === 'train').run_id;
  const pages = [['/', '/'], ['/runs', '/runs'], [`/runs/${train}`, 'run'], [`/runs/${killed}`, 'run'], ['/jobs/77', 'job'],
    [`/runs/compare?runs=${finished.join(',')}`, 'run']];
  for (const width of [1280, 390]) {
    for (const [path, kind] of pages) {
      const { page, errors, close } = await open(path, width);
      await ready[kind](page);
      assert.deepEqual(await axe(page), [], `${path} at ${width} px`);
      const wide = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(wide <= width, `${path} at ${width} px is ${wide} px wide`);
      const t = await page.evaluate(() => {
        const fcp = performance.getEntriesByName('first-contentful-paint')[0]?.startTime;
        const plotly = performance.getEntriesByType('resource').find((e) => /plotly/.test(e.name));
        return { fcp, plotly: plotly ? plotly.startTime : null };
      });
      assert.ok(t.fcp > 0, `${path}: first paint measured`);
      if (t.plotly !== null) assert.ok(t.plotly >= t.fcp, `${path}: plotly.js asked for at ${t.plotly} ms, before the first paint at ${t.fcp} ms`);
      console.log(`first paint ${path} at ${width} px: ${t.fcp.toFixed(0)} ms${t.plotly === null ? '' : `, plotly.js asked for at ${t.plotly.toFixed(0)} ms`}`);
      assert.deepEqual(errors, [], path);
      await close();
    }
  }
});

test('the filtered runs as CSV and their totals agree with the API; serve stored nothing', async () => {
  const api = await (await fetch(`${base}/api/v1/runs?sort=-start`)).json();
  const csv = await fetch(`${base}/api/v1/runs?format=csv&sort=-start`);
  assert.match(csv.headers.get('content-type'), /^text\/csv/);
  const lines = (await csv.text()).trim().split('\r\n');
  const head = lines[0].split(',');
  assert.equal(lines.length, api.length + 1);
  for (const [i, r] of api.entries()) {
    const cells = lines[i + 1].split(',');
    assert.equal(cells[head.indexOf('run_id')], r.run_id);
    assert.equal(Number(cells[head.indexOf('energy_j')]), r.total_energy_j);
    assert.equal(cells[head.indexOf('unfinished')], String(r.unfinished));
  }
  const totals = await (await fetch(`${base}/api/v1/totals?by=task`)).json();
  assert.equal(totals.runs, api.length);
  const sum = api.reduce((s, r) => s + (r.total_energy_j || 0), 0);
  assert.ok(Math.abs(totals.energy_j - sum) < 1e-6 * sum, `${totals.energy_j} against ${sum}`);
  assert.deepEqual(totals.groups.map((g) => g.key).sort(), ['eval', 'killed', 'train']);
  const failed = await (await fetch(`${base}/api/v1/runs?exit=unfinished`)).json();
  assert.deepEqual(failed.map((r) => r.run_id), [killed]);
  // The page's export link carries the filter.
  const { page, close } = await open('/runs?task=train');
  await ready['/runs'](page);
  assert.match(await page.getAttribute('#csv', 'href'), /format=csv/);
  assert.match(await page.getAttribute('#csv', 'href'), /task=train/);
  await page.selectOption('#by', 'task');
  await page.waitForSelector('table[data-table=totals]');
  assert.match(await page.textContent('table[data-table=totals]'), /train/);
  // Energy over time across the filtered runs: a bar a day.
  await page.selectOption('#by', 'day');
  await page.waitForSelector('svg[data-chart=energy_over_time] rect');
  const day = totals.groups.length ? (await (await fetch(`${base}/api/v1/totals?by=day&task=train`)).json()).groups : [];
  assert.equal(await page.locator('svg[data-chart=energy_over_time] rect').count(), day.length);
  assert.deepEqual(await axe(page), []);
  await close();
  assert.equal(runs().length, 3, 'serve --db without --record stored no run of its own');
});

test('a long run zooms to the minute: the window asked for again at full resolution, on a clock axis', async () => {
  // Two hours at 1 s from nvidia-smi, with a one-minute 100 -> 700 W staircase an hour in.
  const stairs = (s) => (s >= 3600 && s < 3660 ? 100 + 100 * Math.floor((s - 3600) * 7 / 60) : 150);
  const p2 = (n) => String(n).padStart(2, '0');
  let csv = 'timestamp, index, name, uuid, power.draw [W], utilization.gpu [%]\n';
  for (let s = 0; s < 7200; s++)
    csv += `2026/11/20 ${p2(8 + Math.floor(s / 3600))}:${p2(Math.floor(s / 60) % 60)}:${p2(s % 60)}.000, 0, NVIDIA H100, GPU-z, ${stairs(s).toFixed(2)} W, 50 %\n`;
  writeFileSync(join(dir, 'long.csv'), csv);
  const zdb = join(dir, 'zoom.db');
  ws('import', 'nvidia-smi', join(dir, 'long.csv'), '--task', 'stairs', '--utc', '--db', zdb);
  const id = JSON.parse(ws('show', '--db', zdb, '--json')).run_id;
  const z = await startServe(WS, ['--listen', '127.0.0.1:0', '--db', zdb], { cwd: dir, env: env() });
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`${z.base}/runs/${id}`);
    await ready.run(page);
    const chart = '[data-chart="gpu_power"]';
    assert.equal(await page.evaluate((c) => document.querySelector(c)._fullLayout.xaxis.type, chart), 'date');
    const before = await page.evaluate((c) => document.querySelector(c)._fullData[0].x.length, chart);
    assert.ok(before <= 2000, `${before} points for the whole run`);
    // A drag over one minute of the chart, as plotly reports it.
    await page.evaluate((c) => Plotly.relayout(document.querySelector(c), { 'xaxis.range[0]': '2026-11-20 09:00:00', 'xaxis.range[1]': '2026-11-20 09:01:00' }), chart);
    await page.waitForFunction(() => document.body.dataset.zoomed !== undefined, null, { timeout: 20000 });
    const drawn = await page.evaluate((c) => {
      const d = document.querySelector(c);
      return { x: [...d._fullData[0].x], y: [...d._fullData[0].y], range: d._fullLayout.xaxis.range };
    }, chart);
    const inside = drawn.x.map((x, i) => [x, drawn.y[i]]).filter(([x]) => x >= Date.parse('2026-11-20T09:00:00Z') && x <= Date.parse('2026-11-20T09:01:00Z'));
    assert.ok(inside.length >= 60, `${inside.length} points in the zoomed minute`);
    for (const [x, y] of inside) assert.equal(y, stairs((x - Date.parse('2026-11-20T08:00:00Z')) / 1000), new Date(x).toISOString());
    assert.match(await page.textContent('[data-note=window]'), /2026-11-20 09:00:00 to 2026-11-20 09:01:00 UTC/);
    assert.match(drawn.range[0], /^2026-11-20 09:00/);
    // Back to the whole run.
    await page.click('[data-zoom=reset]');
    await page.waitForFunction((n) => document.querySelector('[data-chart="gpu_power"]')._fullData?.[0].x.length === n, before, { timeout: 20000 });
    assert.deepEqual(errors, []);
    await context.close();
  } finally {
    const gone = new Promise((r) => z.serve.once('exit', r));
    z.serve.kill('SIGTERM');
    await gone;
  }
});
