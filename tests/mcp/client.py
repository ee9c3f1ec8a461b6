"""A real MCP client (the official Python SDK, PyPI `mcp`) for tests/e2e/mcp.rs.

    python client.py PLAN.json

PLAN: {"stdio": {"command": ..., "args": [...], "cwd": ..., "env": {...}} | "http": {"url": ..., "token": ...},
       "discover": true (optional: the 2026-07-28 revision, no initialize),
       "calls": [{"name": ..., "arguments": {...}}]}
Prints what it saw as one JSON document.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def session(plan, read, write):
    out = {"calls": []}
    info = types.Implementation(name="talaria-test-py", version="1.0")
    async with ClientSession(read, write, client_info=info) as s:
        if plan.get("discover"):
            found = await s.discover()
            out["supported"] = list(found.supported_versions)
        else:
            started = await s.initialize()
            out["server"] = started.server_info.name
        out["protocol"] = str(s.protocol_version)
        tools = await s.list_tools()
        out["tools"] = [t.name for t in tools.tools]
        for call in plan.get("calls", []):
            try:
                result = await s.call_tool(call["name"], call.get("arguments", {}))
                text = "\n".join(c.text for c in result.content if c.type == "text")
                out["calls"].append({"isError": bool(result.is_error), "text": text})
            except Exception as e:  # a JSON-RPC error
                out["calls"].append({"rpcError": str(e)})
    return out


async def main():
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    if "stdio" in plan:
        spec = plan["stdio"]
        env = {**os.environ, **spec.get("env", {})}
        params = StdioServerParameters(command=spec["command"], args=spec.get("args", []), env=env, cwd=spec.get("cwd"))
        async with stdio_client(params) as (read, write):
            out = await session(plan, read, write)
    else:
        token = plan["http"].get("token")
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(plan["http"]["url"], http_client=http) as (read, write):
                out = await session(plan, read, write)
    print(json.dumps(out))


asyncio.run(main())
