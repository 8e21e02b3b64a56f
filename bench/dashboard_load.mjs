// Server CPU spent on one dashboard page load in headless Chromium (which asks for `br, gzip`): a cold load in a fresh
// browser context (nothing cached) and a reload (revalidation), three of each, with serve's CPU time read from
// /proc/PID/task/*/schedstat (nanoseconds, every thread) around each load.
// Usage: node bench/dashboard_load.mjs URL SERVE_PID [TOKEN]
import { readdirSync, readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';

const [url, pid, token] = process.argv.slice(2);
const cpuNs = () => readdirSync(`/proc/${pid}/task`).reduce((sum, t) => {
  try { return sum + Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]); } catch { return sum; }
}, 0);
const browser = await chromium.launch({
  executablePath: process.env.WATTSCOPE_CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const rows = [];
for (let i = 0; i < 3; i++) {
  const context = await browser.newContext({ extraHTTPHeaders: headers });
  const page = await context.newPage();
  for (const kind of ['cold', 'reload']) {
    const c0 = cpuNs(), t0 = Date.now();
    if (kind === 'cold') await page.goto(url + '/', { timeout: 120000 }); else await page.reload({ timeout: 120000 });
    await page.waitForFunction(() => typeof Plotly !== 'undefined' && document.getElementById('power')?._fullData, null, { timeout: 120000 });
    rows.push({ kind, ms: Date.now() - t0, cpu_ms: (cpuNs() - c0) / 1e6 });
  }
  await context.close();
}
await browser.close();
for (const kind of ['cold', 'reload']) {
  const r = rows.filter((x) => x.kind === kind);
  console.log(`${kind.padEnd(6)} page load: serve CPU ${r.map((x) => x.cpu_ms.toFixed(1)).join(', ')} ms; ` +
              `until charts drawn ${r.map((x) => x.ms).join(', ')} ms`);
}
