"""The Python SDK's (PyPI `mcp`) high-level `Client` in its default mode, for tests/e2e/mcp_serve.rs.

    python default_client.py PLAN.json

`Client(...)` with no `mode` probes `server/discover` and speaks 2026-07-28 when the server
does, falling back to `initialize`; `"mode": "legacy"` forces the handshake. Elicitation
is declared only when the plan answers it; on 2026-07-28 it arrives inside an
`input_required` result and the SDK calls the tool again with the answer.

PLAN: {"stdio": {"command": ..., "args": [...], "cwd": ..., "env": {...}}
       | "http": {"url": ..., "headers": {...}},
       "mode": "legacy" (optional),
       "elicit": "accept" | "decline" (optional: declare elicitation, answer so),
       "calls": [{"name": ..., "arguments": {...}, "requestState": ... (optional: sent as a retry)}]}
Prints what it saw as one JSON document: the protocol, the questions asked, each call's
text, every HTTP exchange (method and status) and every SDK log record at WARNING or above.
"""

import asyncio
import json
import logging
import os
import sys

import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


class Records(logging.Handler):
    """Every log record at WARNING or above, from the SDK or anything it uses."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")


async def run(plan, server, out):
    asked = out["asked"]

    async def elicit(context, params):
        asked.append(params.message)
        if plan["elicit"] == "accept":
            return types.ElicitResult(action="accept", content={"allow": True})
        return types.ElicitResult(action="decline")

    kwargs = {"client_info": types.Implementation(name="talaria-test-default", version="1.0")}
    if plan.get("elicit"):
        kwargs["elicitation_callback"] = elicit
    if plan.get("mode"):
        kwargs["mode"] = plan["mode"]
    async with Client(server, **kwargs) as client:
        out["protocol"] = client.protocol_version
        tools = await client.list_tools()
        out["tools"] = [t.name for t in tools.tools]
        for call in plan.get("calls", []):
            try:
                if "requestState" in call:  # a retry of a call this client never made
                    result = await client.session.call_tool(
                        call["name"],
                        call.get("arguments", {}),
                        request_state=call["requestState"],
                        allow_input_required=True,
                    )
                else:
                    result = await client.call_tool(call["name"], call.get("arguments", {}))
                text = "\n".join(c.text for c in result.content if c.type == "text")
                out["calls"].append({"isError": bool(result.is_error), "text": text})
            except Exception as e:  # a JSON-RPC error
                out["calls"].append({"rpcError": str(e)})


async def main():
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    records = Records()
    logging.getLogger().addHandler(records)
    out = {"calls": [], "asked": [], "exchanges": []}
    try:
        if "stdio" in plan:
            spec = plan["stdio"]
            env = {**os.environ, **spec.get("env", {})}
            await run(
                plan,
                StdioServerParameters(command=spec["command"], args=spec.get("args", []), env=env, cwd=spec.get("cwd")),
                out,
            )
        else:

            async def seen(response):
                out["exchanges"].append([response.request.method, response.status_code])

            async with create_mcp_http_client(headers=plan["http"].get("headers")) as http:
                http.event_hooks = {"response": [seen]}
                await run(plan, streamable_http_client(plan["http"]["url"], http_client=http), out)
    except BaseException as e:  # the connection failed: say how
        out["error"] = repr(e)
    out["logged"] = records.lines
    print(json.dumps(out))


asyncio.run(main())
