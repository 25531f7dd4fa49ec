// A worker's Timing tab in headless Chromium (run by spec/host/timing_spec.lua):
//   node timing.test.js BASE_URL WORKER DAY EXPECT_JSON
// EXPECT_JSON: {"wait": {"count": n, "rows": [to, ...]}, "run": {...}}.
// Checks: the tab shows the day's counts and one histogram row per bucket,
// with the API's upper bounds; another day shows nothing recorded.
"use strict";
const { argv, check, run } = require("./browser");

const [base, worker, day, expectJSON] = argv("timing", ["BASE_URL", "WORKER", "DAY", "EXPECT_JSON"]);
const expect = JSON.parse(expectJSON);

run("timing", async (page) => {
  await page.goto(base + "/#/w/" + encodeURIComponent(worker) + "/timing?day=" + day, { waitUntil: "load" });
  for (const kind of ["wait", "run"]) {
    const count = page.locator(`#${kind}-count .v`);
    await count.waitFor({ timeout: 10000 });
    check(await count.textContent() === String(expect[kind].count), `${kind}: count ${expect[kind].count}`);
    const rows = await page.locator(`#timing-${kind} table.histogram tbody tr`).evaluateAll(
      (trs) => trs.map((tr) => Number(tr.getAttribute("data-to"))));
    check(JSON.stringify(rows) === JSON.stringify(expect[kind].rows), `${kind}: buckets ${JSON.stringify(rows)}`);
  }
  check(await page.locator("#f-day").inputValue() === day, "the day picker shows the day");
  await page.fill("#f-day", "2001-01-01");
  await page.click("form.bar button[type=submit]");
  await page.waitForFunction(() => /2001-01-01/.test(location.hash), null, { timeout: 10000 });
  await page.locator("#wait-count .v").waitFor({ timeout: 10000 });
  await page.waitForFunction(() => document.querySelector("#wait-count .v").textContent === "0", null, { timeout: 10000 });
  check(await page.locator("#timing-wait table.histogram").count() === 0, "another day: nothing recorded");
});
