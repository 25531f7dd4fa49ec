// The dashboard's "Running calls" table in headless Chromium (run by
// spec/web/dashboard_spec.lua, whose host runs one Late call that never ends
// on its own, timeout 10 s):  node calls.test.js BASE_URL WORKER
// Checks: the call is listed with its worker, shard, state (waiting: it sleeps
// in luakiq.sleep) and timeout; once it has run past
// 80% of its timeout its row is highlighted (class "late"); no console errors.
"use strict";
const { argv, check, run } = require("./browser");

const [base, worker] = argv("calls", ["BASE_URL", "WORKER"]);

run("calls", async (page) => {
  await page.goto(base + "/", { waitUntil: "load" });
  const row = page.locator(`#calls tbody tr[data-worker="${worker}"]`);
  await row.waitFor({ timeout: 10000 });
  const cells = await row.locator("td").allTextContents();
  // Thread | Worker | Shard | State | Running | Timeout; the call sleeps in
  // luakiq.sleep, so it is parked ("waiting (I/O)") nearly all the time
  check(cells[1] === worker && cells[2] === "0" && cells[5] === "10 s", "the running call is listed: " + cells.join(" | "));
  check(cells[3] === "waiting (I/O)", "a call in luakiq.sleep shows as waiting: " + cells[3]);
  check(!(await row.getAttribute("class")), "not highlighted while under 80% of its timeout (" + cells[4] + ")");
  await page.locator(`#calls tbody tr.late[data-worker="${worker}"]`).waitFor({ timeout: 12000 });
  const late = await page.locator(`#calls tbody tr.late[data-worker="${worker}"] td`).allTextContents();
  // (the age is shown rounded to 0.1 s: the highlight may come at "8.0 s")
  check(parseFloat(late[4]) >= 8, "highlighted past 80% of its timeout: " + late.join(" | "));
});
