// The official MCP TypeScript SDK (@modelcontextprotocol/sdk) as an agent's client of a Tollgate
// MCP server, over streamable HTTP: lists the tools, then calls one — with, when given, a payment
// in `_meta["x402/payment"]` — and prints `{tools, result}` as one JSON line.
//
//   node mcp-client.cjs URL TOOL ARGUMENTS_JSON [PAYMENT_JSON]
//
// It pays nothing itself: the SDK has no x402 support; what is checked is what the seller answers
// an ordinary MCP client, and that a payment sent through the SDK's `_meta` is taken.
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

async function main() {
  const [url, tool, argumentsJson, paymentJson] = process.argv.slice(2);
  const client = new Client({ name: "tollgate-test-agent", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const { tools } = await client.listTools();
  const request = { name: tool, arguments: JSON.parse(argumentsJson) };
  if (paymentJson) request._meta = { "x402/payment": JSON.parse(paymentJson) };
  const result = await client.callTool(request);
  process.stdout.write(JSON.stringify({ tools: tools.map((t) => t.name), result }) + "\n");
  await client.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
