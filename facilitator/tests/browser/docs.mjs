// Opens a running daemon's API reference (/docs) in headless Chromium and looks for every
// operation of its /openapi.json: a visible section naming the method and the path, reachable
// from the page's navigation. Records every request the page makes (the page must fetch nothing
// but itself) and every in-page link whose target is missing. Takes a screenshot.
//
// Usage: node docs.mjs <facilitator url> <screenshot.png>
// Prints one JSON line: {"operations", "found", "missing", "unlinked", "brokenLinks", "requests", "errors"}.
// Chromium: TOLLGATE_CHROMIUM or /usr/bin/chromium; playwright-core from .tools/playwright/.

import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const require = createRequire(path.join(root, ".tools/playwright/"));
const { chromium } = require("playwright-core");

const [base, screenshot] = process.argv.slice(2);
const contract = await (await fetch(`${base}/openapi.json`)).json();
const operations = [];
for (const [p, item] of Object.entries(contract.paths)) {
  for (const method of ["get", "post", "put", "patch", "delete"]) {
    if (item[method]) operations.push({ method: method.toUpperCase(), path: p });
  }
}

const browser = await chromium.launch({
  executablePath: process.env.TOLLGATE_CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const requests = [];
  const errors = [];
  page.on("request", (r) => requests.push(r.url()));
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  await page.goto(`${base}/docs`);
  await page.screenshot({ path: screenshot });

  const found = [];
  const missing = [];
  const unlinked = [];
  for (const op of operations) {
    const section = page.locator(`section.operation[data-method="${op.method}"][data-path="${op.path}"]`);
    const ok =
      (await section.count()) === 1 &&
      (await section.isVisible()) &&
      (await section.locator("h3").textContent()).replace(/\s+/g, " ").trim() === `${op.method} ${op.path}`;
    (ok ? found : missing).push(`${op.method} ${op.path}`);
    if (ok) {
      const id = await section.getAttribute("id");
      if ((await page.locator(`nav a[href="#${id}"]`).count()) !== 1) unlinked.push(`${op.method} ${op.path}`);
    }
  }
  // Every in-page link leads somewhere on the page.
  const brokenLinks = await page.evaluate(() =>
    [...document.querySelectorAll('a[href^="#"]')]
      .map((a) => a.getAttribute("href").slice(1))
      .filter((id) => !document.getElementById(id)),
  );
  console.log(
    JSON.stringify({ operations: operations.length, found: found.length, missing, unlinked, brokenLinks, requests, errors }),
  );
} finally {
  await browser.close();
}
