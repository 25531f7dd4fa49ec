// Launches Debian's Chromium headless through playwright-core (no browser
// download): the flags keep it from phoning home, the profile is thrown away.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { chromium } = require("playwright-core");

const EXECUTABLE = process.env.CHROMIUM || "/usr/bin/chromium";

async function launch() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "luakiq-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: EXECUTABLE,
    headless: true,
    viewport: { width: 1280, height: 860 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--no-first-run"],
  });
  const close = async () => {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  };
  return { context, close };
}

// The arguments after the script's name, or exit 2 with the usage line when
// one is missing. name: the test's name ("calls" for calls.test.js).
function argv(name, names) {
  const args = process.argv.slice(2);
  if (names.some((_, i) => !args[i])) {
    console.error(`usage: node ${name}.test.js ${names.join(" ")}`);
    process.exit(2);
  }
  return args;
}

function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
  console.log("ok - " + what);
}

// Runs one browser test: body(page, problems) on a new page of a fresh
// headless Chromium; console and page errors land in problems (body may add
// listeners of its own), and any left at the end fail the test. Exits 0
// ("NAME: all checks passed") or 1.
function run(name, body) {
  (async () => {
    const { context, close } = await launch();
    const problems = [];
    try {
      const page = await context.newPage();
      page.on("console", (m) => { if (m.type() === "error") problems.push("console: " + m.text()); });
      page.on("pageerror", (e) => problems.push("page error: " + e.message));
      await body(page, problems);
      check(problems.length === 0, "no console errors" + (problems.length ? ":\n  " + problems.join("\n  ") : ""));
    } finally {
      await close();
    }
  })().then(() => { console.log(name + ": all checks passed"); process.exit(0); },
    (e) => { console.error(name + ": " + (e && e.stack || e)); process.exit(1); });
}

// The index of the column headed `header` in the table `selector` (so a test
// does not count columns: a new one does not shift it).
async function column(page, selector, header) {
  const heads = await page.$$eval(selector + " thead th", (ths) => ths.map((th) => th.textContent));
  check(heads.includes(header), `${selector} has a ${header} column (${heads.join(", ")})`);
  return heads.indexOf(header);
}

module.exports = { launch, argv, check, run, column, EXECUTABLE };
