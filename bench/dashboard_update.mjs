// The live dashboard's cost of one chart update (issue 52): Plotly.extendTraces on a chart of 8 GPU traces holding a
// 24 h view, as the page kept it before (86,400 points a trace at 1 s) and as it keeps it now (600 points a trace: a
// point per range/600, the mean of its samples). Median of 20 updates each, in headless Chromium, with the
// plotly.js serve sends.
// Usage: node bench/dashboard_update.mjs BUILD_DIR
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

const build = resolve(process.argv[2] || 'build');
const serve = spawn(join(build, 'wattscope'), ['serve', '--listen', '127.0.0.1:0'],
  { env: { ...process.env, WATTSCOPE_NVML_LIBRARY: '/nonexistent/libnvidia-ml.so.1', WATTSCOPE_CGROUP_ROOT: 'none' } });
const base = await new Promise((ok, fail) => {
  let err = '';
  serve.stderr.on('data', (d) => { err += d; const m = err.match(/serving on (http:\/\/127\.0\.0\.1:\d+)\//); if (m) ok(m[1]); });
  serve.on('exit', (c) => fail(new Error('serve exited ' + c + ': ' + err)));
});
const browser = await chromium.launch({
  executablePath: process.env.WATTSCOPE_CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
await page.goto(base + '/');
await page.waitForFunction(() => typeof Plotly !== 'undefined', null, { timeout: 30000 });
const out = {};
for (const points of [86400, 600]) {
  out[`points_${points}`] = await page.evaluate(async (n) => {
    const div = document.createElement('div');
    div.style.width = '600px'; div.style.height = '300px';
    document.body.append(div);
    const t0 = Date.now() - n * 1000;
    const traces = Array.from({ length: 8 }, (_, g) => ({ type: 'scatter', mode: 'lines', x: Array.from({ length: n }, (_, i) => new Date(t0 + i * 1000)), y: Array.from({ length: n }, (_, i) => 300 + 50 * Math.sin(i / 600 + g)) }));
    let a = performance.now();
    await Plotly.newPlot(div, traces, { xaxis: { type: 'date' } });
    const first_ms = performance.now() - a;
    const times = [];
    for (let k = 0; k < 20; k++) {
      const t = new Date(t0 + (n + k) * 1000);
      a = performance.now();
      await Plotly.extendTraces(div, { x: traces.map(() => [t]), y: traces.map(() => [300]) }, traces.map((_, i) => i), n);
      times.push(performance.now() - a);
    }
    times.sort((p, q) => p - q);
    div.remove();
    return { first_draw_ms: +first_ms.toFixed(1), update_median_ms: +times[10].toFixed(1), update_max_ms: +times[19].toFixed(1) };
  }, points);
}
out.ratio = +(out.points_86400.update_median_ms / out.points_600.update_median_ms).toFixed(1);
console.log(JSON.stringify(out, null, 1));
await browser.close();
serve.kill('SIGTERM');
