// The dashboard's jobs-per-minute chart in headless Chromium (run by
// spec/host/timing_spec.lua):  node history.test.js BASE_URL PROCESSED FAILED
// Checks: on load it shows the last hour (from GET /api/v1/history) with the
// given totals; the 24 hours and 7 days ranges show the same jobs.
"use strict";
const { argv, check, run } = require("./browser");

const [base, processed, failed] = argv("history", ["BASE_URL", "PROCESSED", "FAILED"]);

run("history", async (page) => {
  await page.goto(base + "/", { waitUntil: "load" });
  const want = (label) => `${processed} processed, ${failed} failed in the ${label} (all hosts)`;
  for (const [id, label] of [[null, "last hour"], ["24h", "last 24 hours"], ["7d", "last 7 days"], ["1h", "last hour"]]) {
    if (id) await page.click("#range-" + id);
    await page.waitForFunction((text) => {
      const n = document.getElementById("chart-note");
      return n && n.textContent === text;
    }, want(label), { timeout: 15000 }).catch(async () => {
      throw new Error("chart note: " + await page.locator("#chart-note").textContent());
    });
    check(true, label + ": " + want(label));
    if (id) check(await page.locator("#range-" + id).getAttribute("class") === "on", label + " is marked");
  }
  check(/^(#\/?)?$/.test(await page.evaluate(() => location.hash)), "the range links stay on the dashboard");
});
