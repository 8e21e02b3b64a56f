// What the browser tests share: starting `wattscope serve` and waiting for its address, and launching Chromium.
import { spawn } from 'node:child_process';
import { chromium } from 'playwright-core';

// Spawns `wattscope serve ARGS` and resolves with { serve, base } once it says where it listens (rejects when it
// exits first or says nothing within 15 s).
export async function startServe(binary, args, options) {
  const serve = spawn(binary, ['serve', ...args], options);
  const base = await new Promise((resolve, reject) => {
    let err = '';
    serve.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/serving on (http:\/\/127\.0\.0\.1:\d+)\//);
      if (m) resolve(m[1]);
    });
    serve.on('exit', (code) => reject(new Error(`serve exited ${code}: ${err}`)));
    setTimeout(() => reject(new Error('serve did not start: ' + err)), 15000);
  });
  return { serve, base };
}

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.WATTSCOPE_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run'],
  });
}
