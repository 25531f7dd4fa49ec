// The pause/resume buttons in headless Chromium (run by
// spec/web/dashboard_spec.lua):  node pause.test.js BASE_URL WORKER
// Checks: the worker's queue page has "pause"; clicked and confirmed, the
// API reports the worker paused and the workers table marks it; "resume"
// then undoes it. No console errors.
"use strict";
const { argv, check, run } = require("./browser");

const [base, worker] = argv("pause", ["BASE_URL", "WORKER"]);

async function paused() {
  const r = await fetch(base + "/api/web/dashboard");
  const d = await r.json();
  return d.queues.find((q) => q.name === worker).paused;
}

run("pause", async (page) => {
  await page.goto(base + "/#/w/" + encodeURIComponent(worker) + "/queue", { waitUntil: "load" });
  const pause = page.locator("#pause");
  await pause.waitFor({ timeout: 10000 });
  check(await paused() === false, "not paused at first");
  page.once("dialog", (d) => d.accept());
  await pause.click();
  await page.waitForSelector("#toast", { state: "visible" });
  check(/paused true/.test(await page.locator("#toast").textContent()), "the toast says paused");
  check(await paused() === true, "the API reports it paused");
  await page.locator("#resume").waitFor({ timeout: 10000 });
  check(true, "the button turned into resume");
  await page.goto(base + "/#/", { waitUntil: "load" });
  await page.locator(`#workers tr[data-worker="${worker}"] [data-field="paused"]`).waitFor({ timeout: 10000 });
  check(true, "the workers table marks it paused");
  await page.goto(base + "/#/w/" + encodeURIComponent(worker) + "/queue", { waitUntil: "load" });
  page.once("dialog", (d) => d.accept());
  await page.locator("#resume").click();
  await page.locator("#pause").waitFor({ timeout: 10000 });
  check(await paused() === false, "resumed");
});
