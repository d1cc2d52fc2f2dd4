// A buyer using the official x402 batch-settlement client (@x402/fetch + @x402/evm's
// batch-settlement client, from npm): it GETs the URL `count` times with one client, so the
// first request deposits into a payment channel and the others send signed vouchers; then, with
// `refund`, it asks the seller for a cooperative refund of what it did not spend. It prints one
// JSON line: {statuses, bodies, paymentResponses, refund}.
//
//   node batch-buyer.cjs <url> <network> <asset> <cap> <count> [refund]
//
// BUYER_KEY signs; RPC_URL is the chain's JSON-RPC (the client reads its channel there when it
// has no state of its own). Run by the tests with NODE_PATH pointing at .tools/x402/node_modules.
"use strict";

const { wrapFetchWithPaymentFromConfig, decodePaymentResponseHeader } = require("@x402/fetch");
const { toClientEvmSigner } = require("@x402/evm");
const { BatchSettlementEvmScheme } = require("@x402/evm/batch-settlement/client");
const { privateKeyToAccount } = require("viem/accounts");
const { createPublicClient, http } = require("viem");

async function main() {
  const [url, network, asset, cap, count, refund] = process.argv.slice(2);
  const account = privateKeyToAccount(process.env.BUYER_KEY);
  const reader = createPublicClient({ transport: http(process.env.RPC_URL) });
  const scheme = new BatchSettlementEvmScheme(toClientEvmSigner(account, reader));
  const pay = wrapFetchWithPaymentFromConfig(fetch, {
    schemes: [{ network: "eip155:*", client: scheme }],
    spendControls: { allowedAssets: [{ network, asset, maxAmountPerPayment: cap }] },
  });
  const out = { statuses: [], bodies: [], paymentResponses: [] };
  for (let i = 0; i < Number(count); i++) {
    const response = await pay(url, { method: "GET" });
    const header = response.headers.get("PAYMENT-RESPONSE");
    out.statuses.push(response.status);
    out.paymentResponses.push(header ? decodePaymentResponseHeader(header) : null);
    out.bodies.push(await response.text());
  }
  if (refund === "refund") {
    out.refund = await scheme.refund(url);
  }
  console.log(JSON.stringify(out));
}

main().catch((error) => {
  console.error(error && error.stack ? error.stack : String(error));
  process.exit(1);
});
