"""A real A2A client (PyPI `a2a-sdk`, speaking A2A 1.0 over JSON-RPC) for tests/e2e/serve.rs.

    python a2a_client.py PLAN.json

PLAN: {"base_url": "http://127.0.0.1:PORT", "token": "...",
       "calls": [{"kind": "card"}
                 | {"kind": "send", "text": ..., "context": ID, "stream": bool, "immediately": bool}
                 | {"kind": "get", "task": ID or "last"}
                 | {"kind": "cancel", "task": ID or "last"}
                 | {"kind": "list", "context": ID}]}
The client finds the agent by its card (with the token on every request), as an agent would.
Prints one JSON document: a list with, per call, what the client got or the error it raised.
"""

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
)
from google.protobuf import json_format


def as_dict(message):
    return json_format.MessageToDict(message)


def text_of(parts):
    return "".join(p.get("text", "") for p in parts)


async def send(factory, card, call, seen):
    client = factory(call.get("stream", False)).create(card)
    message = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(text=call["text"])],
    )
    if "context" in call:
        message.context_id = call["context"]
    request = SendMessageRequest(message=message)
    if call.get("immediately"):
        request.configuration.return_immediately = True
    events, task, artifact = [], None, ""
    async for event in client.send_message(request):
        event = as_dict(event)
        kind = next(iter(event))
        if kind == "task":
            task = event["task"]
            events.append("task:" + task["status"]["state"])
        elif kind == "statusUpdate":
            task = dict(task or {}, status=event["statusUpdate"]["status"])
            events.append("status:" + event["statusUpdate"]["status"]["state"])
        elif kind == "artifactUpdate":
            update = event["artifactUpdate"]
            piece = text_of(update["artifact"]["parts"])
            artifact = artifact + piece if update.get("append") else piece
            events.append("artifact" + (":last" if update.get("lastChunk") else ""))
        else:
            events.append(kind)
    seen["last"] = task["id"]
    answer = {"task": task, "events": events, "state": task["status"]["state"]}
    if call.get("stream"):
        answer["text"] = artifact
    else:
        answer["text"] = "".join(text_of(a["parts"]) for a in task.get("artifacts", []))
    return answer


async def run(plan):
    headers = {"Authorization": "Bearer " + plan["token"]}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:

        def factory(streaming):
            return ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))

        results, seen = [], {}
        card = None
        for call in plan["calls"]:
            try:
                if card is None or call["kind"] == "card":
                    card = await A2ACardResolver(http, plan["base_url"]).get_agent_card()
                if call["kind"] == "card":
                    results.append({"card": as_dict(card)})
                    continue
                client = factory(False).create(card)
                if call["kind"] == "send":
                    results.append(await send(factory, card, call, seen))
                elif call["kind"] == "get":
                    task = await client.get_task(GetTaskRequest(id=seen.get(call["task"], call["task"])))
                    results.append({"task": as_dict(task)})
                elif call["kind"] == "cancel":
                    task = await client.cancel_task(CancelTaskRequest(id=seen.get(call["task"], call["task"])))
                    results.append({"task": as_dict(task)})
                elif call["kind"] == "list":
                    listed = await client.list_tasks(ListTasksRequest(context_id=call["context"]))
                    results.append(as_dict(listed))
            except Exception as e:  # noqa: BLE001 - the test asserts which error it was
                results.append({"error": type(e).__name__, "message": str(e)})
        return results


def main():
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    print(json.dumps(asyncio.run(run(plan))))


if __name__ == "__main__":
    main()
