// The official x402 batch-settlement client (@x402/evm 2.27's batch-settlement/client, from npm)
// makes the payloads a buyer sends for a requirement: its first request's deposit (with the
// voucher for that request), then, once the seller has answered that deposit, the next request's
// voucher. Prints both as one JSON line: {deposit, voucher}, each {x402Version, payload}.
//
//   node batch-payloads.cjs '<requirement JSON>'
//
// BUYER_KEY signs. Run by facilitator/tests/batch.rs with NODE_PATH pointing at
// .tools/x402/node_modules (scripts/test installs the packages there).
"use strict";

const { BatchSettlementEvmScheme } = require("@x402/evm/batch-settlement/client");
const { privateKeyToAccount } = require("viem/accounts");

async function main() {
  const requirement = JSON.parse(process.argv[2]);
  const account = privateKeyToAccount(process.env.BUYER_KEY);
  const scheme = new BatchSettlementEvmScheme(account);
  const deposit = await scheme.createPaymentPayload(2, requirement);
  // What the client records from the seller's answer to that deposit: the channel holds the
  // deposit, and one request is charged.
  await scheme.storage.set(deposit.payload.voucher.channelId, {
    balance: deposit.payload.deposit.amount,
    chargedCumulativeAmount: requirement.amount,
  });
  const voucher = await scheme.createPaymentPayload(2, requirement);
  console.log(JSON.stringify({ deposit, voucher }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
