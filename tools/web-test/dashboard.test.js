// Drives the dashboard of a running, seeded `luakiq run --web` in headless
// Chromium (run by spec/web/dashboard_spec.lua, which seeds the host):
//   node dashboard.test.js BASE_URL EXPECT_JSON
// EXPECT_JSON: {"workers": [names], "worker": W, "enqueued": n, "dead": n, "dead_id": id}
// Checks: no console errors or page errors; the worker names and W's numbers
// are shown; refreshing works; on W's dead page, a dismissed confirm() changes
// nothing and an accepted one requeues dead_id (it leaves the morgue and is
// listed on the enqueued page and by the API). Exit 0 when all hold.
"use strict";
const { argv, check, run, column } = require("./browser");

const [base, expectJson] = argv("dashboard", ["BASE_URL", "EXPECT_JSON"]);
const expect = JSON.parse(expectJson);

async function api(path) {
  const r = await fetch(base + path);
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

run("dashboard", async (page, problems) => {
  page.on("requestfailed", (r) => problems.push("request failed: " + r.url()));
  page.on("response", (r) => { if (r.status() >= 400) problems.push("HTTP " + r.status() + ": " + r.url()); });

  await page.goto(base + "/", { waitUntil: "load" });
  await page.waitForSelector("#workers tbody tr[data-worker]");
  const names = await page.$$eval("#workers tbody tr[data-worker]", (rows) => rows.map((r) => r.dataset.worker));
  check(JSON.stringify(names) === JSON.stringify(expect.workers), "worker names shown: " + names.join(", "));
  const row = page.locator(`#workers tr[data-worker="${expect.worker}"]`);
  const cells = await row.locator("td").allTextContents();
  const enq = await column(page, "#workers", "Enqueued"), dead = await column(page, "#workers", "Dead");
  check(cells[enq] === String(expect.enqueued), `${expect.worker} enqueued shows ${expect.enqueued} (got ${cells[enq]})`);
  check(cells[dead] === String(expect.dead), `${expect.worker} dead shows ${expect.dead} (got ${cells[dead]})`);
  const stale = await column(page, "#workers", "Stale");
  check(cells[stale] === "0", `${expect.worker} stale shows 0 (got ${cells[stale]})`);
  check(await page.locator("#total-dead .v").textContent() !== "", "totals shown");
  const snoozed = await row.locator("td").nth(await column(page, "#workers", "Snoozed")).textContent();
  check(snoozed === "0" && await page.locator("#total-snoozed .v").textContent() === "0", "Snoozed column and card");
  check(await page.locator("#redis .v").first().textContent() !== "-", "Redis version shown");
  const before = await page.locator("#status").textContent();
  await page.waitForFunction((b) => document.querySelector("#status").textContent !== b, before, { timeout: 5000 });
  check(true, "the page refreshes by itself");
  check(await page.locator("canvas#chart").count() === 1, "the chart is drawn");

  // The dead page, through the Dead link of the worker's row.
  await row.locator("td").nth(dead).locator("a").click();
  const button = page.locator(`#jobs[data-page="morgue"] button[data-action="requeue"][data-id="${expect.dead_id}"]`);
  await button.waitFor();
  check(true, "dead page lists " + expect.dead_id);

  page.once("dialog", (d) => d.dismiss());
  await button.click();
  await page.waitForTimeout(300);
  let morgue = await api(`/api/web/workers/${encodeURIComponent(expect.worker)}/jobs?what=morgue&order=id`);
  check(morgue.jobs.some((j) => j.id === expect.dead_id), "a dismissed confirm() leaves the job dead");

  let question = "";
  page.once("dialog", (d) => { question = d.message(); d.accept(); });
  await button.click();
  await page.waitForSelector("#toast", { state: "visible" });
  const toast = await page.locator("#toast").textContent();
  check(/requeued 1/.test(toast), "confirm() asked \"" + question + "\", toast says \"" + toast + "\"");
  morgue = await api(`/api/web/workers/${encodeURIComponent(expect.worker)}/jobs?what=morgue&order=id`);
  check(!morgue.jobs.some((j) => j.id === expect.dead_id), "the job left the morgue");
  const queue = await api(`/api/web/workers/${encodeURIComponent(expect.worker)}/jobs?what=queue&order=id`);
  check(queue.jobs.some((j) => j.id === expect.dead_id && j.retry_count === -1), "the job is back in the queue (API)");
  await page.locator(`#jobs[data-page="morgue"] tr[data-id="${expect.dead_id}"]`).waitFor({ state: "detached" });
  check(true, "the dead page no longer lists it");

  await page.click("#tab-queue");
  await page.locator(`#jobs[data-page="queue"] tr[data-id="${expect.dead_id}"]`).waitFor();
  check(true, "the enqueued page lists it");
  await page.click("#tab-busy");
  await page.locator('#jobs[data-page="busy"]').waitFor();
  check(true, "the busy page renders");
  await page.goto(base + "/#/", { waitUntil: "load" });
  await page.waitForSelector("#workers tbody tr[data-worker]");
  await page.waitForTimeout(1500); // a few refresh cycles
  check(problems.length === 0, "no console errors, page errors or failed requests" +
    (problems.length ? ":\n  " + problems.join("\n  ") : ""));
});
