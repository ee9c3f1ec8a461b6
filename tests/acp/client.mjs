// A real ACP client for the tests: the official TypeScript SDK drives `talaria acp` through a
// plan of steps, then prints what it saw as one JSON object on stdout.
//
//   node client.mjs PLAN.json
//
// The agent command is $TALARIA_BIN with the argument `acp` (and $TALARIA_ACP_ARGS, split on
// spaces). A plan:
//   {"answers": {"a": "allow_once"},          permission answers by session alias (default reject_once);
//                                              a list is answered in order
//    "clientCapabilities": {...},               with fs/terminal: the handlers below answer
//    "buffers": {"/abs/path": "text"},          unsaved editor buffers fs/read_text_file sees
//    "steps": [
//      {"do": "new", "as": "a", "cwd": "/abs"},
//      {"do": "prompt", "session": "a", "text": "...", "cancelOn": "agent_message_chunk"},
//      {"do": "prompt", "session": "a", "text": "...", "meta": {"traceparent": "00-..."}},
//      {"do": "load", "id": "SESSION", "as": "b", "cwd": "/abs"},
//      {"do": "resume", "id": "SESSION", "as": "b", "cwd": "/abs"},
//      {"do": "list"}, {"do": "mode", "session": "a", "mode": "yolo"}, {"do": "close", "session": "a"},
//      {"do": "together", "steps": [...]}          run steps at the same time
//    ]}
// Output: {"initialize": ..., "results": [...], "updates": [{alias, update}], "permissions": [{alias, request, answer}],
//          "editor": [{method, params}]}   every fs/ and terminal/ request the agent made
// A step that fails records {"error": {code, message}} and the plan goes on.

import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const extra = (process.env.TALARIA_ACP_ARGS || "").split(" ").filter(Boolean);
const agent = spawn(process.env.TALARIA_BIN, ["acp", ...extra], { stdio: ["pipe", "pipe", "inherit"] });

const aliases = new Map(); // session id -> alias
const cancelOn = new Map(); // session id -> update kind that triggers session/cancel
const seen = { initialize: null, results: [], updates: [], permissions: [], editor: [] };
const buffers = new Map(Object.entries(plan.buffers ?? {}));
const terminals = new Map(); // id -> {output, exit: Promise, child}
let nextTerminal = 0;

const editor = (method, handler) => async ({ params }) => {
  seen.editor.push({ method, params });
  return await handler(params);
};
let context = null;

const alias = (id) => aliases.get(id) ?? id;

const app = acp
  .client({ name: "talaria-acp-test" })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
    // One answer for every permission of the session, or a list answered in order.
    const given = (plan.answers ?? {})[alias(params.sessionId)];
    const answer = (Array.isArray(given) ? given.shift() : given) ?? "reject_once";
    seen.permissions.push({ alias: alias(params.sessionId), request: params, answer });
    if (answer === "cancelled") return { outcome: { outcome: "cancelled" } };
    return { outcome: { outcome: "selected", optionId: answer } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, editor("fs/read_text_file", (p) => {
    const text = buffers.has(p.path) ? buffers.get(p.path) : readFileSync(p.path, "utf8");
    return { content: text };
  }))
  .onRequest(acp.methods.client.fs.writeTextFile, editor("fs/write_text_file", (p) => {
    mkdirSync(dirname(p.path), { recursive: true });
    writeFileSync(p.path, p.content);
    buffers.delete(p.path);
    return {};
  }))
  .onRequest(acp.methods.client.terminal.create, editor("terminal/create", (p) => {
    const id = `term-${nextTerminal++}`;
    const child = spawn(p.command, p.args ?? [], { cwd: p.cwd, stdio: ["ignore", "pipe", "pipe"] });
    const t = { output: "", child, status: null };
    child.stdout.on("data", (d) => (t.output += d));
    child.stderr.on("data", (d) => (t.output += d));
    t.exit = new Promise((resolve) =>
      child.on("close", (code, signal) => {
        t.status = { exitCode: code, signal };
        resolve(t.status);
      }),
    );
    terminals.set(id, t);
    return { terminalId: id };
  }))
  .onRequest(acp.methods.client.terminal.waitForExit, editor("terminal/wait_for_exit", async (p) => {
    return await terminals.get(p.terminalId).exit;
  }))
  .onRequest(acp.methods.client.terminal.output, editor("terminal/output", (p) => {
    const t = terminals.get(p.terminalId);
    return { output: t.output, truncated: false, exitStatus: t.status };
  }))
  .onRequest(acp.methods.client.terminal.kill, editor("terminal/kill", (p) => {
    terminals.get(p.terminalId)?.child.kill("SIGKILL");
    return {};
  }))
  .onRequest(acp.methods.client.terminal.release, editor("terminal/release", (p) => {
    terminals.get(p.terminalId)?.child.kill("SIGKILL");
    terminals.delete(p.terminalId);
    return {};
  }))
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
      const asked = { sessionId: session(), prompt, ...(s.meta ? { _meta: s.meta } : {}) };
      const r = await context.request(acp.methods.agent.session.prompt, asked);
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
