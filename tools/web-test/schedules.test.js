// The dashboard's "Recurring jobs" table in headless Chromium (run by
// spec/web/dashboard_spec.lua; its host has the schedule "yearly", cron
// "0 0 1 1 *" on Parked):  node schedules.test.js BASE_URL LAST NEXT
// Checks: the row shows the rule, the last tick (a new schedule records the
// one before it started, without running it) and the next one.
"use strict";
const { argv, check, run } = require("./browser");

const [base, last, next] = argv("schedules", ["BASE_URL", "LAST", "NEXT"]);

run("schedules", async (page) => {
  await page.goto(base + "/", { waitUntil: "load" });
  const row = page.locator('#schedules tr[data-schedule="yearly"]');
  await row.waitFor({ timeout: 10000 });
  const cells = await row.locator("td").allTextContents();
  check(cells[1] === "Parked" && cells[2] === "y", "worker and id: " + cells.join(" | "));
  check(cells[3] === "0 0 1 1 * (UTC)", "the rule: " + cells[3]);
  check(cells[4] === last, "last tick " + last + ": " + cells[4]);
  check(cells[5] === next, "next tick " + next + ": " + cells[5]);
});
