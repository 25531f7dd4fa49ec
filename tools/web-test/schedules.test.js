// The dashboard's "Recurring jobs" table in headless Chromium (run by
// spec/web/dashboard_spec.lua; its host has the schedule "yearly", cron
// "0 0 1 1 *" on Parked):  node schedules.test.js BASE_URL LAST NEXT
// Checks: the row shows the rule, the last tick (a new schedule records the
// one before it started, without running it) and the next one.
"use strict";
const { launch } = require("./browser");

const [base, last, next] = process.argv.slice(2);
if (!base || !last || !next) {
  console.error("usage: node schedules.test.js BASE_URL LAST NEXT");
  process.exit(2);
}

function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
  console.log("ok - " + what);
}

async function main() {
  const { context, close } = await launch();
  const problems = [];
  try {
    const page = await context.newPage();
    page.on("console", (m) => { if (m.type() === "error") problems.push("console: " + m.text()); });
    page.on("pageerror", (e) => problems.push("page error: " + e.message));
    await page.goto(base + "/", { waitUntil: "load" });
    const row = page.locator('#schedules tr[data-schedule="yearly"]');
    await row.waitFor({ timeout: 10000 });
    const cells = await row.locator("td").allTextContents();
    check(cells[1] === "Parked" && cells[2] === "y", "worker and id: " + cells.join(" | "));
    check(cells[3] === "0 0 1 1 * (UTC)", "the rule: " + cells[3]);
    check(cells[4] === last, "last tick " + last + ": " + cells[4]);
    check(cells[5] === next, "next tick " + next + ": " + cells[5]);
    check(problems.length === 0, "no console errors" + (problems.length ? ":\n  " + problems.join("\n  ") : ""));
  } finally {
    await close();
  }
}

main().then(() => { console.log("schedules: all checks passed"); process.exit(0); },
  (e) => { console.error("schedules: " + (e && e.stack || e)); process.exit(1); });
