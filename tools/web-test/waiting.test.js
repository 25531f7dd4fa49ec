// The jobs that wait for a reply in headless Chromium (run by
// spec/web/dashboard_spec.lua, which makes the waits through the Redis
// scripts):  node waiting.test.js BASE_URL WORKER EXPECT_JSON
// EXPECT_JSON: {"waiting": n, "ids": [id, ...], "keys": {id: key},
// "replied": [id, ...], "late": [id, ...]}.
// Checks: the Waiting card and the worker's Waiting cell show n; the cell
// links to the worker's Waiting view, which lists every waiting id with its
// state and key; the late replies are listed below; no console errors.
"use strict";
const { argv, check, run, column } = require("./browser");

const [base, worker, expectJSON] = argv("waiting", ["BASE_URL", "WORKER", "EXPECT_JSON"]);
const expect = JSON.parse(expectJSON);

run("waiting", async (page, problems) => {
  page.on("response", (r) => { if (r.status() >= 400) problems.push("HTTP " + r.status() + ": " + r.url()); });
  await page.goto(base + "/", { waitUntil: "load" });
  const row = page.locator(`#workers tr[data-worker="${worker}"]`);
  await row.waitFor({ timeout: 10000 });
  const cell = row.locator("td").nth(await column(page, "#workers", "Waiting"));
  check(await cell.textContent() === String(expect.waiting), `${worker}'s Waiting cell shows ${expect.waiting}`);
  check(await page.locator("#total-waiting .v").textContent() === String(expect.waiting),
    `the Waiting card shows ${expect.waiting}`);

  await cell.locator("a").click();
  await page.locator("#waiting tbody tr[data-id]").first().waitFor({ timeout: 10000 });
  check(await page.locator("#tab-waiting").getAttribute("class") === "on", "the Waiting tab is the one shown");
  const ids = (await page.locator("#waiting tbody tr[data-id]").evaluateAll((rs) => rs.map((r) => r.dataset.id))).sort();
  check(JSON.stringify(ids) === JSON.stringify(expect.ids.slice().sort()), "the waiting ids are listed: " + ids.join(","));
  for (const id of expect.replied) {
    const state = await page.locator(`#waiting tr[data-id="${id}"] [data-field="state"]`).textContent();
    check(state === "replied", `${id}: replied (got ${state})`);
  }
  for (const [id, key] of Object.entries(expect.keys)) {
    const shown = await page.locator(`#waiting tr[data-id="${id}"] [data-field="key"]`).textContent();
    check(shown === key, `${id}: key ${key} (got ${shown})`);
  }
  const late = await page.locator("#late-replies tbody tr[data-id]").evaluateAll((rs) => rs.map((r) => r.dataset.id));
  check(JSON.stringify(late) === JSON.stringify(expect.late), "the late replies are listed: " + late.join(","));
});
