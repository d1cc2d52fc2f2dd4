// Drives the dashboard in headless Chromium: signs in, generates a key, reads it once, uses it
// against the API, checks it is not shown again, deletes it (accepting the confirmation), and
// uses it again. Takes a screenshot with the new key on screen.
//
// Usage: node dashboard.mjs <facilitator url> <admin token> <screenshot.png>
// Prints one JSON line: {"key", "listed", "statusBefore", "shownAgain", "statusAfter", "gone"}.
// Chromium: TOLLGATE_CHROMIUM or /usr/bin/chromium; playwright-core from .tools/playwright/.

import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const require = createRequire(path.join(root, ".tools/playwright/"));
const { chromium } = require("playwright-core");

const [base, adminToken, screenshot] = process.argv.slice(2);
const api = (key) =>
  fetch(`${base}/payment/history/9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin`, {
    headers: { authorization: `Bearer ${key}` },
  }).then((r) => r.status);

const browser = await chromium.launch({
  executablePath: process.env.TOLLGATE_CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("dialog", (dialog) => dialog.accept());

  await page.goto(`${base}/dashboard`);
  await page.fill("#token", adminToken);
  await page.click("button[type=submit]");
  await page.getByRole("heading", { name: "API Keys" }).waitFor();

  await page.fill("input[name=label]", "browser test");
  await page.selectOption("select[name=plan]", "premium");
  await page.click("#generate");
  const key = (await page.locator("#new-key").textContent()).trim();
  await page.click("#copy");
  await page.screenshot({ path: screenshot, fullPage: true });
  const id = (await page.locator(".new-key strong").textContent()).replace("New key ", "").trim();
  const row = page.locator(`tr[data-key="${id}"]`);
  const listed = (await row.count()) === 1 && (await row.textContent()).includes("browser test");

  const statusBefore = await api(key);

  await page.goto(`${base}/dashboard`);
  const shownAgain = (await page.content()).includes(key);

  await page.locator(`tr[data-key="${id}"] button.danger`).click();
  await page.locator(".notice.done").waitFor();
  const gone = (await page.locator(`tr[data-key="${id}"]`).count()) === 0;
  const statusAfter = await api(key);

  if (errors.length) throw new Error("page errors: " + errors.join("; "));
  console.log(JSON.stringify({ key, listed, statusBefore, shownAgain, statusAfter, gone }));
} finally {
  await browser.close();
}
