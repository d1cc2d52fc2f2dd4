// Drives the demo page in headless Chromium: clicks the first "Pay & fetch", waits for the paid
// content and its transaction, waits for the payment in the live feed, pays the card listed as
// `POST /summarize` the same way, and takes a screenshot.
//
// Usage: node pay-and-fetch.mjs <page url> <screenshot.png>
// Prints one JSON line: {"transaction", "content", "feedTransactions", "posted": {"path", "transaction", "content"}}.
// Chromium: TOLLGATE_CHROMIUM or /usr/bin/chromium; playwright-core from .tools/playwright/
// (scripts/test installs both).

import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const require = createRequire(path.join(root, ".tools/playwright/"));
const { chromium } = require("playwright-core");

const [url, screenshot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.TOLLGATE_CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(url);
  // Pays a card; its transaction and the content shown.
  async function payCard(card) {
    await card.getByRole("button", { name: "Pay & fetch" }).click();
    const failure = card.locator(".error");
    const tx = card.locator(".tx-id");
    await Promise.race([tx.waitFor({ timeout: 30000 }), failure.waitFor({ timeout: 30000 })]);
    if (await failure.count()) throw new Error(await failure.textContent());
    return { transaction: await tx.textContent(), content: JSON.parse(await card.locator(".content").textContent()) };
  }
  const { transaction, content } = await payCard(page.locator("#item-0"));
  // The feed polls the shop's history: the payment shows up there, confirmed.
  await page.locator("#feed td.status-confirmed").first().waitFor({ timeout: 15000 });
  const feedTransactions = await page.locator("#feed td.tx").evaluateAll((cells) => cells.map((c) => c.title));
  const postCard = page.locator(".card", { hasText: "POST /summarize" });
  const posted = { path: await postCard.locator(".path").first().textContent(), ...(await payCard(postCard)) };
  await page.screenshot({ path: screenshot, fullPage: true });
  if (errors.length) throw new Error("page errors: " + errors.join("; "));
  console.log(JSON.stringify({ transaction, content, feedTransactions, posted }));
} finally {
  await browser.close();
}
