// A buyer using the official x402 client (@x402/fetch + @x402/evm, from npm): it GETs the URL,
// pays the 402 with what the offer asks, signed by BUYER_KEY (an EIP-3009 authorization, or a
// Permit2 permit for `exact` through Permit2 and for `upto`), and prints what it got as one
// JSON line: {status, body, paymentResponse}. The client pays only assets it knows unless told:
// the token (`asset` on `network`) is allowed up to `cap` atomic units a payment.
//
//   node x402-buyer.cjs <url> <network> <asset> <cap>
//
// RPC_URL, when set, is the chain's JSON-RPC. Run by tests/tests/official_client.rs with NODE_PATH pointing at .tools/x402/node_modules
// (scripts/test installs the packages there).
"use strict";

const { wrapFetchWithPaymentFromConfig, decodePaymentResponseHeader } = require("@x402/fetch");
const { ExactEvmScheme } = require("@x402/evm");
const { UptoEvmScheme } = require("@x402/evm/upto/client");
const { privateKeyToAccount } = require("viem/accounts");

async function main() {
  const [url, network, asset, cap] = process.argv.slice(2);
  const account = privateKeyToAccount(process.env.BUYER_KEY);
  // With the chain's RPC the client reads its Permit2 allowance, and signs an EIP-2612 permit
  // when it has none and the seller declared eip2612GasSponsoring.
  const options = process.env.RPC_URL ? { rpcUrl: process.env.RPC_URL } : undefined;
  const pay = wrapFetchWithPaymentFromConfig(fetch, {
    schemes: [
      { network: "eip155:*", client: new ExactEvmScheme(account, options) },
      { network: "eip155:*", client: new UptoEvmScheme(account, options) },
    ],
    spendControls: { allowedAssets: [{ network, asset, maxAmountPerPayment: cap }] },
  });
  const response = await pay(url, { method: "GET" });
  const header = response.headers.get("PAYMENT-RESPONSE");
  const paymentResponse = header ? decodePaymentResponseHeader(header) : null;
  const body = await response.text();
  console.log(JSON.stringify({ status: response.status, body, paymentResponse }));
}

main().catch((error) => {
  console.error(error && error.stack ? error.stack : String(error));
  process.exit(1);
});
