// The pager of a worker's Enqueued page in headless Chromium (run by
// spec/web/dashboard_spec.lua):  node paging.test.js BASE_URL WORKER PREFIX N
// The worker has N queued jobs PREFIX001..PREFIXN (and maybe others after
// them by id). Checks: by id, page 1 starts at PREFIX001; "next" follows the
// API's cursor (in the URL) to PREFIX101 and PREFIX201; "previous" goes back
// to PREFIX101 by offset; the range shown matches each page.
"use strict";
const { argv, check, run } = require("./browser");

const [base, worker, prefix] = argv("paging", ["BASE_URL", "WORKER", "PREFIX", "N"]);
const id = (n) => prefix + String(n).padStart(3, "0");

run("paging", async (page) => {
  const first = async () => page.locator("#jobs tbody tr[data-id]").first().getAttribute("data-id");
  const settle = async (want) => {
    await page.waitForFunction((w) => {
      const r = document.querySelector("#jobs tbody tr[data-id]");
      return r && r.dataset.id === w;
    }, want, { timeout: 10000 });
  };
  await page.goto(base + "/#/w/" + encodeURIComponent(worker) + "/queue?order=id", { waitUntil: "load" });
  await settle(id(1));
  check(await first() === id(1), "page 1 starts at " + id(1));
  check(await page.locator("#page-range").textContent() === "1\u2013100", "page 1 shows 1-100");
  check(await page.locator("#prev-page").isDisabled(), "no previous page on page 1");

  await page.locator("#next-page").click();
  await settle(id(101));
  check(/cursor=/.test(page.url()), "next follows a cursor: " + page.url());
  check(await page.locator("#page-range").textContent() === "101\u2013200", "page 2 shows 101-200");

  await page.locator("#next-page").click();
  await settle(id(201));
  check(await page.locator("#page-range").textContent().then((t) => t.startsWith("201\u2013")), "page 3 starts at 201");

  await page.locator("#prev-page").click();
  await settle(id(101));
  check(/offset=100/.test(page.url()) && !/cursor=/.test(page.url()), "previous goes back by offset: " + page.url());
});
