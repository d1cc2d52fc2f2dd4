// A buyer signing in with the official x402 sign-in-with-x client (@x402/extensions, from npm):
// it GETs the URL, answers the 402's sign-in challenge with BUYER_KEY's signature (EIP-4361), and
// prints what it got as one JSON line: {status, body}.
//
//   node siwx-client.cjs <url>
//
// Run by tests/tests/official_client.rs with NODE_PATH pointing at .tools/x402/node_modules
// (scripts/test installs the packages there).
"use strict";

const { wrapFetchWithSIWx } = require("@x402/extensions/sign-in-with-x");
const { privateKeyToAccount } = require("viem/accounts");

async function main() {
  const [url] = process.argv.slice(2);
  const account = privateKeyToAccount(process.env.BUYER_KEY);
  const signIn = wrapFetchWithSIWx(fetch, account);
  const response = await signIn(url, { method: "GET" });
  console.log(JSON.stringify({ status: response.status, body: await response.text() }));
}

main().catch((error) => {
  console.error(error && error.stack ? error.stack : String(error));
  process.exit(1);
});
