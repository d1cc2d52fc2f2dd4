// The official x402 discovery client (@x402/extensions' withBazaar around @x402/core's
// HTTPFacilitatorClient, from npm) reads a facilitator's catalog: it lists the `http` resources
// and searches for QUERY, and prints both answers as one JSON line: {list, search}.
//
//   node bazaar-client.cjs <facilitator url> <query>
//
// Run by tests/tests/official_client.rs with NODE_PATH pointing at .tools/x402/node_modules.
"use strict";

const { HTTPFacilitatorClient } = require("@x402/core/server");
const { withBazaar } = require("@x402/extensions/bazaar");

async function main() {
  const [url, query] = process.argv.slice(2);
  const client = withBazaar(new HTTPFacilitatorClient({ url }));
  const list = await client.extensions.bazaar.listResources({ type: "http", limit: 10 });
  const search = await client.extensions.bazaar.search({ query, limit: 5 });
  console.log(JSON.stringify({ list, search }));
}

main().catch((error) => {
  console.error(error && error.stack ? error.stack : String(error));
  process.exit(1);
});
