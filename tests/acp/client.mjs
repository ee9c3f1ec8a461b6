// A real ACP client for the tests: the official TypeScript SDK drives `talaria acp` through a
// plan of steps, then prints what it saw as one JSON object on stdout.
//
//   node client.mjs PLAN.json
//
// The agent command is $TALARIA_BIN with the argument `acp` (and $TALARIA_ACP_ARGS, split on
// spaces). A plan:
//   {"answers": {"a": "allow_once"},          permission answers by session alias (default reject_once)
//    "clientCapabilities": {...},
//    "steps": [
//      {"do": "new", "as": "a", "cwd": "/abs"},
//      {"do": "prompt", "session": "a", "text": "...", "cancelOn": "agent_message_chunk"},
//      {"do": "load", "id": "SESSION", "as": "b", "cwd": "/abs"},
//      {"do": "resume", "id": "SESSION", "as": "b", "cwd": "/abs"},
//      {"do": "list"}, {"do": "mode", "session": "a", "mode": "yolo"}, {"do": "close", "session": "a"},
//      {"do": "together", "steps": [...]}          run steps at the same time
//    ]}
// Output: {"initialize": ..., "results": [...], "updates": [{alias, update}], "permissions": [{alias, request, answer}]}
// A step that fails records {"error": {code, message}} and the plan goes on.

import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const extra = (process.env.TALARIA_ACP_ARGS || "").split(" ").filter(Boolean);
const agent = spawn(process.env.TALARIA_BIN, ["acp", ...extra], { stdio: ["pipe", "pipe", "inherit"] });

const aliases = new Map(); // session id -> alias
const cancelOn = new Map(); // session id -> update kind that triggers session/cancel
const seen = { initialize: null, results: [], updates: [], permissions: [] };
let context = null;

const alias = (id) => aliases.get(id) ?? id;

const app = acp
  .client({ name: "talaria-acp-test" })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
    const answer = (plan.answers ?? {})[alias(params.sessionId)] ?? "reject_once";
    seen.permissions.push({ alias: alias(params.sessionId), request: params, answer });
    if (answer === "cancelled") return { outcome: { outcome: "cancelled" } };
    return { outcome: { outcome: "selected", optionId: answer } };
  })
  .onNotification(acp.methods.client.session.update, async ({ params }) => {
    seen.updates.push({ alias: alias(params.sessionId), update: params.update });
    const trigger = cancelOn.get(params.sessionId);
    if (trigger && params.update.sessionUpdate === trigger) {
      cancelOn.delete(params.sessionId);
      await context.notify(acp.methods.agent.session.cancel, { sessionId: params.sessionId });
    }
  });

async function step(s) {
  const session = () => {
    for (const [id, a] of aliases) if (a === s.session) return id;
    return s.session;
  };
  switch (s.do) {
    case "new": {
      const r = await context.request(acp.methods.agent.session.new, { cwd: s.cwd, mcpServers: s.mcpServers ?? [] });
      aliases.set(r.sessionId, s.as);
      return r;
    }
    case "load":
    case "resume": {
      aliases.set(s.id, s.as);
      const method = s.do === "load" ? acp.methods.agent.session.load : acp.methods.agent.session.resume;
      return await context.request(method, { sessionId: s.id, cwd: s.cwd, mcpServers: [] });
    }
    case "prompt": {
      if (s.cancelOn) cancelOn.set(session(), s.cancelOn);
      const prompt = s.prompt ?? [{ type: "text", text: s.text }];
      const r = await context.request(acp.methods.agent.session.prompt, { sessionId: session(), prompt });
      return { ...r, session: s.session };
    }
    case "list":
      return await context.request(acp.methods.agent.session.list, s.cwd ? { cwd: s.cwd } : {});
    case "mode":
      return await context.request(acp.methods.agent.session.setMode, { sessionId: session(), modeId: s.mode });
    case "close":
      return await context.request(acp.methods.agent.session.close, { sessionId: session() });
    case "together":
      return await Promise.all(s.steps.map((inner) => run(inner)));
    default:
      throw new Error(`unknown step ${s.do}`);
  }
}

async function run(s) {
  try {
    return (await step(s)) ?? null;
  } catch (e) {
    return { error: { code: e.code ?? null, message: e.message ?? String(e), data: e.data ?? null } };
  }
}

const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
await app.connectWith(stream, async (ctx) => {
  context = ctx;
  seen.initialize = await ctx.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: plan.clientCapabilities ?? {},
  });
  for (const s of plan.steps) seen.results.push(await run(s));
});
agent.stdin.end();
const code = await new Promise((resolve) => agent.on("exit", (c) => resolve(c)));
seen.exit = code;
process.stdout.write(JSON.stringify(seen) + "\n");
