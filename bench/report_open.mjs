// Time to open a report in headless Chromium and draw every chart (body[data-ready]), best of three loads.
// Usage: node bench/report_open.mjs FILE.html
import { chromium } from 'playwright-core';
const file = process.argv[2];
const browser = await chromium.launch({
  executablePath: process.env.WATTSCOPE_CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
const times = [];
for (let i = 0; i < 3; i++) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const t0 = Date.now();
  await page.goto('file://' + file);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 60000 });
  times.push(Date.now() - t0);
  if (errors.length) { console.error('JavaScript errors:', errors); process.exitCode = 1; }
  await page.close();
}
await browser.close();
console.log(`report opened and drawn in ${Math.min(...times)} ms (best of 3: ${times.join(', ')} ms)`);
