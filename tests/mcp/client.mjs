// A real MCP client (the official TypeScript SDK) for tests/e2e/mcp.rs: connects to the server
// named on the command line, lists its tools, makes the calls of a plan, and prints what it saw
// as one JSON document.
//
//   node client.mjs PLAN.json
//   PLAN: {"stdio": {"command": "...", "args": [...], "cwd": "...", "env": {...}}
//          | "http": {"url": "...", "token": "..."},
//          "protocol": "2025-03-26" (optional: the revision offered in initialize),
//          "calls": [{"name": "...", "arguments": {...}}],
//          "elicit": "accept" | "decline" (optional: declare elicitation, answer so)}
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const transport = plan.stdio
  ? new StdioClientTransport({ ...plan.stdio, env: { ...process.env, ...(plan.stdio.env ?? {}) }, stderr: "inherit" })
  : new StreamableHTTPClientTransport(new URL(plan.http.url), {
      requestInit: plan.http.token ? { headers: { Authorization: `Bearer ${plan.http.token}` } } : undefined,
    });
if (plan.protocol) {
  // This SDK offers its newest revision; an older client is played by rewriting the handshake.
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if (message.method === "initialize") message.params.protocolVersion = plan.protocol;
    return send(message, options);
  };
}
const capabilities = plan.elicit ? { elicitation: {} } : {};
const client = new Client({ name: "talaria-test-client", version: "1.0.0" }, { capabilities });
const asked = [];
if (plan.elicit) {
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params.message);
    return plan.elicit === "accept" ? { action: "accept", content: { allow: true } } : { action: "decline" };
  });
}
const out = { calls: [], asked };
try {
  await client.connect(transport);
  out.server = client.getServerVersion();
  out.protocol = transport.protocolVersion ?? null;
  const { tools } = await client.listTools();
  out.tools = tools.map((t) => ({ name: t.name, annotations: t.annotations ?? null }));
  for (const call of plan.calls ?? []) {
    try {
      const result = await client.callTool({ name: call.name, arguments: call.arguments ?? {} });
      out.calls.push({ isError: result.isError ?? false, text: result.content.map((c) => c.text ?? "").join("\n") });
    } catch (e) {
      out.calls.push({ rpcError: { code: e.code ?? null, message: String(e.message ?? e) } });
    }
  }
} catch (e) {
  out.error = String(e.message ?? e);
}
await client.close().catch(() => {});
console.log(JSON.stringify(out));
