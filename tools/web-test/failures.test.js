// The dashboard's Failures page in headless Chromium (run by
// spec/web/failures_spec.lua):  node failures.test.js BASE_URL GROUP OTHER
// Checks: both groups are listed with their counts per worker; OTHER's jobs
// page lists its jobs, each linking to its worker's list; GROUP is requeued
// through its confirm() dialog and leaves the page; OTHER stays.
"use strict";
const { argv, check, run } = require("./browser");

const [base, group, other] = argv("failures", ["BASE_URL", "GROUP", "OTHER"]);

run("failures", async (page) => {
  const row = (g) => page.locator("#failures tr").filter({ has: page.locator("pre", { hasText: g }) });
  await page.goto(base + "/", { waitUntil: "load" });
  await page.locator("#failures-link").click();
  await row(group).waitFor({ timeout: 15000 });
  check(true, "the Failures page lists " + group);
  check((await row(group).locator('[data-field="count"]').textContent()) === "2", group + ": 2 jobs");
  check((await row(group).locator('[data-worker="B"]').textContent()).startsWith("B: 2"), group + ": B has both");
  check((await row(other).locator('[data-field="count"]').textContent()) === "6", other + ": 6 jobs");
  const perWorker = await row(other).locator("[data-worker]").allTextContents();
  check(perWorker.length === 2 && perWorker[0].startsWith("A: 4") && perWorker[1].startsWith("B: 2"),
    other + " per worker: " + perWorker.join(" | "));

  // the jobs of one group and worker, each linking to its list
  await row(other).locator('[data-worker="A"] a').click();
  await page.locator("#group-jobs tr[data-id]").first().waitFor({ timeout: 15000 });
  const ids = (await page.locator("#group-jobs tr[data-id]").evaluateAll((rs) => rs.map((r) => r.dataset.id))).sort();
  check(JSON.stringify(ids) === JSON.stringify(["1", "2", "3", "4"]), "A's jobs of the group: " + ids.join(","));
  check((await page.locator("#group").textContent()) === other, "the page names the group");
  const href = await page.locator('#group-jobs tr[data-id="1"] a').getAttribute("href");
  check(href === "#/w/A/morgue?order=id&min=1&max=1", "a dead job links to the morgue: " + href);

  // requeue a whole group through confirm()
  await page.goto(base + "/#/failures", { waitUntil: "load" });
  await row(group).waitFor({ timeout: 15000 });
  let question = "";
  page.once("dialog", (d) => { question = d.message(); d.accept(); });
  // every text the toast shows, so a failure says what it showed instead
  await page.evaluate(() => {
    window.toasts = [];
    new MutationObserver(() => window.toasts.push(document.getElementById("toast").textContent))
      .observe(document.getElementById("toast"), { childList: true, characterData: true, subtree: true });
  });
  await row(group).locator('[data-action="requeue"]').click();
  try {
    await page.waitForFunction(() => window.toasts.some((t) => /due now 1, requeued 1/.test(t)), null, { timeout: 15000 });
  } catch (e) {
    throw new Error("the toast showed: " + JSON.stringify(await page.evaluate(() => window.toasts)) + ": " + e.message);
  }
  check(question.includes(group), "the dialog names the group: " + question);
  // the requeued jobs keep their error until they run: the page shows the
  // group until then, and drops it on a refresh after (it does not poll)
  const gone = () => page.evaluate((g) => !Array.from(document.querySelectorAll("#failures pre")).some((p) => p.textContent === g), group);
  for (let deadline = Date.now() + 15000; !(await gone()) && Date.now() < deadline;) {
    await page.waitForTimeout(200);
    await page.locator("#refresh").click();
  }
  check(await gone(), group + " is gone after the requeue (its jobs ran) and a refresh");
  check(await row(other).count() === 1, other + " is still listed");
});
