// Signing in to a host with web_token in headless Chromium (run by
// spec/web/dashboard_spec.lua):  node login.test.js BASE_URL TOKEN
// Checks: without the cookie the page shows the sign-in form and no data; a
// wrong token says so; the right one shows the dashboard, and the page's
// script cannot read the token (HttpOnly); "Sign out" brings the form back
// and the API refuses the browser again. No console errors but the 401s
// that signing in is about.
"use strict";
const { argv, check, run } = require("./browser");

const [base, token] = argv("login", ["BASE_URL", "TOKEN"]);

run("login", async (page, problems) => {
  await page.goto(base + "/", { waitUntil: "load" });
  await page.locator("#signin").waitFor({ timeout: 10000 });
  check(await page.locator("#workers").count() === 0, "no data before signing in");
  check(await page.locator("#signout").isHidden(), "no sign-out button before signing in");

  await page.fill("#token", token + "-wrong");
  await page.click("#signin button[type=submit]");
  await page.waitForFunction(() => document.getElementById("signin-error").textContent !== "", null, { timeout: 10000 });
  check(/wrong token/.test(await page.locator("#signin-error").textContent()), "a wrong token is refused");

  await page.fill("#token", token);
  await page.click("#signin button[type=submit]");
  await page.locator("#workers").waitFor({ timeout: 10000 });
  check(true, "the right token shows the dashboard");
  check(!(await page.evaluate(() => document.cookie)).includes(token), "the page's script cannot read the token");
  const cookies = await page.context().cookies(base);
  const c = cookies.find((x) => x.name === "luakiq_token");
  check(c && c.httpOnly && c.sameSite === "Strict", "the cookie is HttpOnly and SameSite=Strict");
  const api = await page.evaluate(async () => (await fetch("/api/v1/stats")).status);
  check(api === 200, "the API answers the signed-in browser");

  await page.locator("#signout").waitFor({ state: "visible", timeout: 10000 });
  await page.click("#signout");
  await page.locator("#signin").waitFor({ timeout: 10000 });
  check(await page.locator("#workers").count() === 0, "signing out hides the data");
  const after = await page.evaluate(async () => (await fetch("/api/v1/stats")).status);
  check(after === 401, "the API refuses the browser after signing out");
  // the 401s above are the point of this test, not errors of the page
  for (let i = problems.length - 1; i >= 0; i--) {
    if (/status of 401/.test(problems[i])) problems.splice(i, 1);
  }
});
