// The dashboard's warning when Redis may evict keys, in headless Chromium
// (run by spec/faults/redis_spec.lua):  node eviction.test.js BASE_URL POLICY
// POLICY "noeviction": no warning; any other: a warning naming it.
"use strict";
const { argv, check, run } = require("./browser");

const [base, policy] = argv("eviction", ["BASE_URL", "POLICY"]);

run("eviction", async (page) => {
  await page.goto(base + "/", { waitUntil: "load" });
  await page.locator("#totals").waitFor({ timeout: 10000 });
  const n = await page.locator("#eviction-warning").count();
  if (policy === "noeviction") {
    check(n === 0, "no warning with noeviction");
  } else {
    check(n === 1, "a warning is shown");
    const text = await page.locator("#eviction-warning").textContent();
    check(text.includes("maxmemory-policy is " + policy) && text.includes("noeviction"), "it names the policy: " + text);
  }
});
