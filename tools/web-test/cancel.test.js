// The Cancel button of a job in headless Chromium (run by
// spec/web/dashboard_spec.lua):  node cancel.test.js BASE_URL WORKER ID
// Checks: the worker's queue page lists ID with "cancel"; dismissed, nothing
// happens; confirmed, the toast says it was cancelled, the job leaves the
// list and the API no longer finds it. No console errors.
"use strict";
const { argv, check, run } = require("./browser");

const [base, worker, id] = argv("cancel", ["BASE_URL", "WORKER", "ID"]);

async function state() {
  const r = await fetch(base + "/api/v1/workers/" + encodeURIComponent(worker) + "/jobs/" + encodeURIComponent(id));
  return r.status === 200 ? (await r.json()).state : r.status;
}

run("cancel", async (page) => {
  await page.goto(base + "/#/w/" + encodeURIComponent(worker) + "/queue?order=id", { waitUntil: "load" });
  const button = page.locator(`#jobs button[data-action="cancel"][data-id="${id}"]`);
  await button.waitFor({ timeout: 10000 });
  check(await state() === "queued", "queued at first");
  page.once("dialog", (d) => d.dismiss());
  await button.click();
  check(await state() === "queued", "still queued after the dialog was dismissed");
  let question = "";
  page.once("dialog", (d) => { question = d.message(); d.accept(); });
  await button.click();
  await page.waitForSelector("#toast", { state: "visible" });
  const toast = await page.locator("#toast").textContent();
  check(/outcome cancelled/.test(toast) && question.includes(id), "confirm() asked \"" + question + "\", toast says \"" + toast + "\"");
  check(await state() !== "queued", "the API no longer has it queued");
  await page.locator(`#jobs tr[data-id="${id}"]`).waitFor({ state: "detached", timeout: 10000 });
  check(true, "the row left the list");
});
