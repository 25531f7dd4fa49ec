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

module.exports = { launch, EXECUTABLE };
