// The dashboard's Hosts table in headless Chromium (run by
// spec/host/hosts_spec.lua):  node hosts.test.js BASE_URL HOST:PID WANT
// Checks: the host's row is listed and one of its threads' lines contains WANT
// (e.g. a running call "W1 " with its seconds).
"use strict";
const { argv, check, run } = require("./browser");

const [base, hostpid, want] = argv("hosts", ["BASE_URL", "HOST:PID", "WANT"]);

run("hosts", async (page) => {
  await page.goto(base + "/", { waitUntil: "load" });
  const row = page.locator(`#hosts tr[data-host="${hostpid}"]`);
  await row.waitFor({ timeout: 15000 });
  check(true, "the host is listed: " + hostpid);
  await page.waitForFunction(([hp, w]) => {
    const r = document.querySelector(`#hosts tr[data-host="${hp}"]`);
    return r && Array.from(r.querySelectorAll("[data-thread]")).some((d) => d.textContent.includes(w));
  }, [hostpid, want], { timeout: 15000 });
  check(true, "a thread line shows " + want);
});
