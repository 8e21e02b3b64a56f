// issue 35: serve's runs pages on generated stores (tests/support/runs_generator.hpp).
//  - JSON: /api/v1/runs with each filter and order, a few clients at once, on STORE (10,000 or 100,000 runs):
//    p50 / p95 / max per query (goal: < 100 ms at 100,000 runs);
//  - /runs in Chromium: page weight (bytes over the wire), first contentful paint and interactive (the first page
//    of runs drawn: body[data-loaded]) from navigation start (goal: interactive < 300 ms at 10,000 runs).
// Usage: node bench/runs_pages.mjs BUILD_DIR [RUNS=10000] [CLIENTS=4] [STORE: a sqlite path or mysql:// URL, made
//        filled with RUNS generated runs unless it is an existing SQLite file or RUNS_BENCH_NO_GEN is set].
//        Prints one JSON object. RUNS_BENCH_NO_BROWSER=1 times the JSON queries alone.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

const [buildArg = 'build', runsArg = '10000', clientsArg = '4', storeArg] = process.argv.slice(2);
const RUNS = Number(runsArg), CLIENTS = Number(clientsArg);
const pct = (xs, p) => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))];
const build = resolve(buildArg);
const dir = mkdtempSync(join(tmpdir(), 'wattscope-runs-bench-'));
const store = storeArg || join(dir, 'runs.db');
const out = { runs: RUNS, clients: CLIENTS, store: store.startsWith('mysql') ? 'mysql' : 'sqlite' };

if (!process.env.RUNS_BENCH_NO_GEN && !(storeArg && !store.startsWith('mysql') && existsSync(store))) {
  const t0 = performance.now();
  const g = spawnSync(join(build, 'tests', 'wattscope_gen_runs'), [store, String(RUNS)], { encoding: 'utf8' });
  if (g.status !== 0) throw new Error(g.stderr);
  out.generate_ms = Math.round(performance.now() - t0);
}
const serve = spawn(join(build, 'wattscope'), ['serve', '--listen', '127.0.0.1:0', '--interval', '1s', '--db', store],
  { cwd: dir, env: { ...process.env, WATTSCOPE_NVML_LIBRARY: '/nonexistent/libnvidia-ml.so.1', WATTSCOPE_CGROUP_ROOT: 'none' } });
const base = await new Promise((resolve, reject) => {
  let err = '';
  serve.stderr.on('data', (d) => { err += d; const m = err.match(/serving on (http:\/\/127\.0\.0\.1:\d+)\//); if (m) resolve(m[1]); });
  serve.on('exit', (c) => reject(new Error('serve exited ' + c + ': ' + err)));
});

const queries = {
  newest: '/api/v1/runs?sort=-start&limit=50',
  task: '/api/v1/runs?task=task07&sort=-start&limit=50',
  task_host_deep_page: '/api/v1/runs?task=task07&host=node1&offset=100&limit=50',
  slurm_job: '/api/v1/runs?tag=slurm_job_id%3D5010',
  user: '/api/v1/runs?user=user3&limit=50',
  partition_sorted_energy: '/api/v1/runs?tag=slurm_partition%3Ddebug&sort=-energy&limit=50',
  dates: '/api/v1/runs?from=2026-11-03&to=2026-11-04&limit=50',
  method: '/api/v1/runs?method=mixed&limit=50',
  search: '/api/v1/runs?q=seed%203&limit=50',
  sort_duration: '/api/v1/runs?sort=-duration&limit=50',
  sort_duration_up: '/api/v1/runs?sort=duration&limit=50',
  sort_energy: '/api/v1/runs?sort=-energy&limit=50',
  sort_energy_deep_page: '/api/v1/runs?sort=energy&offset=5000&limit=50',
  user_sorted_duration: '/api/v1/runs?user=user3&sort=-duration&limit=50',
  method_sorted_energy: '/api/v1/runs?method=mixed&sort=energy&limit=50',
  search_sorted_duration: '/api/v1/runs?q=seed%203&sort=-duration&limit=50',
  search_one_sorted_energy: '/api/v1/runs?q=gen-000007&sort=-energy&limit=50',
  sort_j_per_unit: '/api/v1/runs?sort=j_per_unit&limit=50',
  user_sorted_j_per_unit: '/api/v1/runs?user=user3&sort=-j_per_unit&limit=50',
  sort_exit_status: '/api/v1/runs?sort=-exit_status&limit=50',
  newest_deep_page: '/api/v1/runs?sort=-start&offset=50000&limit=50',
  search_user: '/api/v1/runs?q=seed%203&user=user3&limit=50',
  search_method_sorted_energy: '/api/v1/runs?q=seed%203&method=mixed&sort=-energy&limit=50',
  job_page_json: '/api/v1/jobs/5010',
  // issue 52: a run by its whole id (one lookup by key), failed runs, an energy bound, the totals and the CSV export
  run_json: '/api/v1/runs/gen-000042',
  failed: '/api/v1/runs?exit=failed&limit=50',
  energy_bound: '/api/v1/runs?min_energy_j=1000&sort=-energy&limit=50',
  totals_by_month: '/api/v1/totals?by=month',
  totals_task_by_user: '/api/v1/totals?task=task07&by=user',
  csv_task: '/api/v1/runs?format=csv&task=task07',
};
// One client alone, then CLIENTS at once (each asking 10 times in a row).
for (const clients of [...new Set([1, CLIENTS])]) {
  const key = `json_ms_${clients}_client${clients === 1 ? '' : 's'}`;
  out[key] = {};
  for (const [name, q] of Object.entries(queries)) {
    await fetch(base + q); // warm the page cache
    const times = [];
    await Promise.all(Array.from({ length: clients }, async () => {
      for (let i = 0; i < 10; i++) {
        const t0 = performance.now();
        const r = await fetch(base + q);
        await r.arrayBuffer();
        if (!r.ok) throw new Error(`${q}: HTTP ${r.status}`);
        times.push(performance.now() - t0);
      }
    }));
    times.sort((a, b) => a - b);
    out[key][name] = { p50: +pct(times, 0.5).toFixed(1), p95: +pct(times, 0.95).toFixed(1), max: +times.at(-1).toFixed(1) };
  }
}

if (process.env.RUNS_BENCH_NO_BROWSER) {
  serve.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
  console.log(JSON.stringify(out, null, 1));
  process.exit(0);
}
const browser = await chromium.launch({
  executablePath: process.env.WATTSCOPE_CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
const loads = [];
for (let i = 0; i < 5; i++) {
  const context = await browser.newContext();
  const page = await context.newPage();
  let bytes = 0, plotly = false;
  page.on('response', async (r) => {
    if (r.url().includes('plotly')) plotly = true;
    try { bytes += (await r.body()).length; } catch { /* redirects carry no body */ }
  });
  await page.goto(base + '/runs');
  await page.waitForFunction(() => document.body.dataset.loaded, null, { timeout: 30000 });
  const t = await page.evaluate(() => ({
    fcp: performance.getEntriesByName('first-contentful-paint')[0]?.startTime,
    interactive: Number(document.body.dataset.interactiveMs),
    rows: document.querySelectorAll('#runs tbody tr').length,
  }));
  loads.push({ ...t, bytes, plotly });
  await context.close();
}
// A run's page: the server's time for a page not yet rendered (a different run each time), and its first paint.
const runLoads = [];
for (let i = 0; i < 5; i++) {
  const id = `gen-${String(1000 + 7 * i).padStart(6, '0')}`;
  const context = await browser.newContext();
  const page = await context.newPage();
  const t0 = performance.now();
  const r = await page.goto(base + '/runs/' + id);
  const server_ms = performance.now() - t0;
  await page.waitForFunction(() => document.body.dataset.ready === '1', null, { timeout: 30000 });
  const fcp = await page.evaluate(() => performance.getEntriesByName('first-contentful-paint')[0]?.startTime);
  runLoads.push({ status: r.status(), cache: r.headers()['x-wattscope-cache'], response_ms: +server_ms.toFixed(1), fcp_ms: fcp === undefined ? null : +fcp.toFixed(1) });
  await context.close();
}
out.run_page = runLoads;
await browser.close();
out.runs_page = loads.map((l) => ({ fcp_ms: +l.fcp.toFixed(1), interactive_ms: +l.interactive.toFixed(1), bytes: l.bytes, rows: l.rows, plotly: l.plotly }));
serve.kill('SIGTERM');
rmSync(dir, { recursive: true, force: true });
console.log(JSON.stringify(out, null, 1));
