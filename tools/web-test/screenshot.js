// Screenshot of the dashboard of a running `luakiq run --web`:
//   node screenshot.js BASE_URL OUT.png [SECONDS]
// Keeps the page open SECONDS (default 60) so that the jobs-per-second chart
// has data, then writes the full page, then the Failures page and the Orders
// worker's Timing tab next to it (OUT-failures.png, OUT-timing.png).
// tools/web-test/screenshot.lua runs a demo host under load and calls this
// to make docs/dashboard*.png.
"use strict";
const { launch } = require("./browser");

const [base, out, seconds] = process.argv.slice(2);
if (!base || !out) {
  console.error("usage: node screenshot.js BASE_URL OUT.png [SECONDS]");
  process.exit(2);
}

async function main() {
  const { context, close } = await launch();
  try {
    const page = await context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(base + "/", { waitUntil: "load" });
    await page.waitForSelector("#workers tbody tr[data-worker]");
    await page.waitForTimeout(1000 * Number(seconds || 60));
    await page.screenshot({ path: out, fullPage: true });
    // the pages behind it: failures by error, and a worker's Timing tab
    // (OUT-failures.png, OUT-timing.png)
    const more = [["failures", "#/failures", "#failures tbody tr"], ["timing", "#/w/Orders/timing", "#timing-run"]];
    for (const [name, hash, ready] of more) {
      await page.goto(base + "/" + hash, { waitUntil: "load" });
      await page.waitForSelector(ready, { timeout: 15000 });
      await page.waitForTimeout(500);
      const file = out.replace(/\.png$/, "") + "-" + name + ".png";
      await page.screenshot({ path: file, fullPage: true });
      console.log("wrote " + file);
    }
    if (errors.length) throw new Error("page errors: " + errors.join("; "));
    console.log("wrote " + out);
  } finally {
    await close();
  }
}

main().catch((e) => { console.error(e && e.stack || e); process.exit(1); });
