// A seller using the official x402 server (@x402/core's HTTP resource server, @x402/evm's exact
// server scheme and @x402/extensions' bazaar server extension, from npm) on Node's own http
// module, with a facilitator reached over HTTP: Tollgate's, in the tests. It sells
// `GET /weather` at `PRICE` atomic units of `TOKEN` (EIP-3009) paid to `PAY_TO`, declared for
// discovery (an example query, its schema and an example answer; service name and tags).
// Once listening it prints one JSON line: {"url": "http://127.0.0.1:<port>"}.
//
// Environment: FACILITATOR_URL, API_KEY (sent as a bearer key), NETWORK, TOKEN, TOKEN_NAME,
// TOKEN_VERSION, PAY_TO, PRICE. Run by the tests with NODE_PATH pointing at .tools/x402/node_modules.
"use strict";

const http = require("node:http");
const { x402ResourceServer, x402HTTPResourceServer, HTTPFacilitatorClient } = require("@x402/core/server");
const { ExactEvmScheme } = require("@x402/evm/exact/server");
const { bazaarResourceServerExtension, declareDiscoveryExtension } = require("@x402/extensions/bazaar");

function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

async function main() {
  const network = env("NETWORK");
  const bearer = { Authorization: `Bearer ${env("API_KEY")}` };
  const facilitator = new HTTPFacilitatorClient({
    url: env("FACILITATOR_URL"),
    createAuthHeaders: async () => ({ verify: bearer, settle: bearer, supported: bearer }),
  });
  const resources = new x402ResourceServer(facilitator)
    .register(network, new ExactEvmScheme())
    .registerExtension(bazaarResourceServerExtension);
  const routes = {
    "GET /weather": {
      accepts: {
        scheme: "exact",
        network,
        payTo: env("PAY_TO"),
        price: {
          amount: env("PRICE"),
          asset: env("TOKEN"),
          extra: { name: env("TOKEN_NAME"), version: env("TOKEN_VERSION") },
        },
      },
      description: "Official weather for a city",
      mimeType: "application/json",
      serviceName: "Official Weather",
      tags: ["weather", "official"],
      extensions: declareDiscoveryExtension({
        input: { city: "Lisbon" },
        inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        output: { example: { city: "Lisbon", celsius: 18 } },
      }),
    },
  };
  const server = new x402HTTPResourceServer(resources, routes);
  await server.initialize();

  const listener = http.createServer(async (req, res) => {
    const send = (status, headers, body) => {
      res.writeHead(status, headers);
      res.end(typeof body === "string" ? body : JSON.stringify(body ?? {}));
    };
    try {
      const url = new URL(req.url, `http://${req.headers.host}`);
      const adapter = {
        getHeader: (name) => {
          const value = req.headers[name.toLowerCase()];
          return Array.isArray(value) ? value[0] : value;
        },
        getMethod: () => req.method,
        getPath: () => url.pathname,
        getUrl: () => url.toString(),
        getAcceptHeader: () => req.headers.accept ?? "",
        getUserAgent: () => req.headers["user-agent"] ?? "",
        getQueryParams: () => Object.fromEntries(url.searchParams),
        getQueryParam: (name) => url.searchParams.get(name) ?? undefined,
      };
      const context = { adapter, path: url.pathname, method: req.method };
      const result = await server.processHTTPRequest(context);
      if (result.type === "no-payment-required") {
        return send(404, { "Content-Type": "application/json" }, { error: "not sold here" });
      }
      if (result.type === "payment-error") {
        const { status, headers, body } = result.response;
        return send(status, headers, body);
      }
      const settled = await server.processSettlement(
        result.paymentPayload,
        result.paymentRequirements,
        result.declaredExtensions,
        { request: context },
        undefined,
        result.beforeHandlerSettlement,
      );
      if (!settled.success) {
        const { status, headers, body } = settled.response;
        return send(status, headers, body);
      }
      const city = url.searchParams.get("city") ?? "Lisbon";
      return send(200, { "Content-Type": "application/json", ...settled.headers }, { city, celsius: 18 });
    } catch (error) {
      console.error(error && error.stack ? error.stack : String(error));
      return send(500, { "Content-Type": "application/json" }, { error: String(error) });
    }
  });
  listener.listen(0, "127.0.0.1", () => {
    console.log(JSON.stringify({ url: `http://127.0.0.1:${listener.address().port}` }));
  });
}

main().catch((error) => {
  console.error(error && error.stack ? error.stack : String(error));
  process.exit(1);
});
