// A buyer using the official x402 client (@x402/fetch + @x402/evm, from npm): it GETs the URL,
// pays the 402 with what the offer asks, signed by BUYER_KEY (an EIP-3009 authorization, or a
// Permit2 permit for `exact` through Permit2 and for `upto`), and prints what it got as one
// JSON line: {status, body, paymentResponse}. The client pays only assets it knows unless told:
// the token (`asset` on `network`) is allowed up to `cap` atomic units a payment.
//
//   node x402-buyer.cjs <url> <network> <asset> <cap>
//
// With HANG_UP_AFTER_BYTES=N it reads the answer's first N bytes (at least), prints them with
// {"hungUp": true}, and exits: its connection closes mid-answer, as a buyer's that hangs up.
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
  if (process.env.HANG_UP_AFTER_BYTES) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let received = "";
    while (received.length < Number(process.env.HANG_UP_AFTER_BYTES)) {
      const { value, done } = await reader.read();
      if (done) break;
      received += decoder.decode(value, { stream: true });
    }
    const line = JSON.stringify({ status: response.status, body: received, hungUp: true }) + "\n";
    // Exiting closes the connection, the rest of the answer unread.
    process.stdout.write(line, () => process.exit(0));
    return;
  }
  const header = response.headers.get("PAYMENT-RESPONSE");
  const paymentResponse = header ? decodePaymentResponseHeader(header) : null;
  const body = await response.text();
  console.log(JSON.stringify({ status: response.status, body, paymentResponse }));
}

main().catch((error) => {
  console.error(error && error.stack ? error.stack : String(error));
  process.exit(1);
});
