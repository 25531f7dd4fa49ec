// The dashboard's search box in headless Chromium (run by
// spec/web/dashboard_spec.lua):  node search.test.js BASE_URL ID TAG DONE
// The spec seeds ID queued in Parked and dead in Flaky, both tagged TAG, and
// one more Parked job tagged TAG (s2), and DONE a finished job Parked keeps
// (keep_done's record, result {"rows":3}). Checks: by id, the id is found in
// both workers; by tag, all three jobs with their states; a result's id links
// to its worker's listing, which shows it; DONE shows "done at ..." and its
// result.
"use strict";
const { argv, check, run } = require("./browser");

const [base, id, tag, done] = argv("search", ["BASE_URL", "ID", "TAG", "DONE"]);

async function search(page, text, by) {
  await page.fill("#search-q", text);
  await page.selectOption("#search-by", by);
  await page.click("#search button[type=submit]");
  await page.waitForFunction(([t]) => {
    const h = document.querySelector("main h2");
    return h && h.textContent.includes(t) && document.querySelector("#search-results");
  }, [text], { timeout: 15000 });
  return page.$$eval("#search-results tbody tr[data-id]",
    (rows) => rows.map((r) => `${r.dataset.worker}/${r.dataset.id}/${r.dataset.state}`));
}

run("search", async (page) => {
  await page.goto(base + "/", { waitUntil: "load" });
  const byId = await search(page, id, "id");
  check(JSON.stringify(byId) === JSON.stringify([`Flaky/${id}/dead`, `Parked/${id}/queued`]),
    "by id: found in every worker that has it: " + byId.join(" "));
  const byTag = await search(page, tag, "tag");
  check(JSON.stringify(byTag) === JSON.stringify([`Flaky/${id}/dead`, "Parked/s2/queued", `Parked/${id}/queued`]),
    "by tag: queued and dead jobs of every worker: " + byTag.join(" "));
  const tags = await page.textContent(`#search-results tr[data-worker="Parked"][data-id="s2"] td:nth-child(4)`);
  check(tags.includes(tag), "a result shows its tags: " + tags);
  await page.click(`#search-results tr[data-worker="Parked"][data-id="s2"] td:nth-child(2) a`);
  await page.waitForFunction(() => /#\/w\/Parked\/queue/.test(location.hash) &&
    Array.from(document.querySelectorAll("#jobs td.id")).some((td) => td.textContent === "s2"), null, { timeout: 15000 });
  check(true, "the id links to Parked's queue, which lists s2");
  const fin = await search(page, done, "id");
  check(JSON.stringify(fin) === JSON.stringify([`Parked/${done}/done`]), "a finished job is found: " + fin.join(" "));
  const state = await page.textContent(`#search-results tr[data-id="${done}"] td[data-field=state]`);
  check(/^done at .+, result \{"rows":3\}$/.test(state), "it shows when it finished and its result: " + state);
  const none = await search(page, "no-such-tag", "tag");
  check(none.length === 0, "an unknown tag finds nothing");
});
