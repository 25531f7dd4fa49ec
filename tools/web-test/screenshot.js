// Screenshot of the dashboard of a running `luakiq run --web`:
//   node screenshot.js BASE_URL OUT.png [SECONDS]
// Keeps the page open SECONDS (default 60) so that the jobs-per-second chart
// has data, then writes the full page. tools/web-test/screenshot.lua runs a
// demo host under load and calls this to make docs/dashboard.png.
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
    if (errors.length) throw new Error("page errors: " + errors.join("; "));
    console.log("wrote " + out);
  } finally {
    await close();
  }
}

main().catch((e) => { console.error(e && e.stack || e); process.exit(1); });
