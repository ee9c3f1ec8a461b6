"""A real OpenAI API client (the official Python SDK, PyPI `openai`) for tests/e2e/serve.rs.

    python openai_client.py PLAN.json

PLAN: {"base_url": "http://127.0.0.1:PORT/v1", "api_key": "...",
       "calls": [{"kind": "models"}
                 | {"kind": "chat", "messages": [...], "stream": bool, "include_usage": bool,
                    "session": NAME (sent as X-Talaria-Session), "user": NAME, "tools": [...]}
                 | {"kind": "responses", "input": ..., "instructions": ..., "stream": bool, "session": NAME}]}
Prints one JSON document: a list with, per call, what the client got or the error it raised.
"""

import json
import sys

import openai


def chat(client, call):
    args = {"model": call.get("model", "talaria"), "messages": call["messages"]}
    if "user" in call:
        args["user"] = call["user"]
    if "tools" in call:
        args["tools"] = call["tools"]
    if "session" in call:
        args["extra_headers"] = {"X-Talaria-Session": call["session"]}
    if not call.get("stream"):
        done = client.chat.completions.create(**args)
        return {
            "content": done.choices[0].message.content,
            "finish_reason": done.choices[0].finish_reason,
            "usage": done.usage.model_dump() if done.usage else None,
            "id": done.id,
        }
    if call.get("include_usage"):
        args["stream_options"] = {"include_usage": True}
    pieces, finish, usage, roles, ids = [], None, None, [], set()
    for chunk in client.chat.completions.create(stream=True, **args):
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    return {"content": "".join(pieces), "pieces": len(pieces), "finish_reason": finish, "usage": usage,
            "roles": roles, "ids": len(ids)}


def responses(client, call):
    args = {"model": call.get("model", "talaria"), "input": call["input"]}
    if "instructions" in call:
        args["instructions"] = call["instructions"]
    if "session" in call:
        args["extra_headers"] = {"X-Talaria-Session": call["session"]}
    if not call.get("stream"):
        done = client.responses.create(**args)
        return {"content": done.output_text, "status": done.status, "usage": done.usage.model_dump(), "id": done.id}
    kinds = []
    with client.responses.stream(**args) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_response()
    deltas = sum(1 for k in kinds if k == "response.output_text.delta")
    return {"content": final.output_text, "status": final.status, "usage": final.usage.model_dump(), "id": final.id,
            "events": [k for k in kinds if k != "response.output_text.delta"], "deltas": deltas}


def main():
    plan = json.load(open(sys.argv[1]))
    client = openai.OpenAI(base_url=plan["base_url"], api_key=plan["api_key"], max_retries=0, timeout=60)
    seen = []
    for call in plan["calls"]:
        try:
            if call["kind"] == "models":
                seen.append({"models": [m.id for m in client.models.list().data]})
            elif call["kind"] == "responses":
                seen.append(responses(client, call))
            else:
                seen.append(chat(client, call))
        except openai.APIStatusError as e:
            seen.append({"error": type(e).__name__, "status": e.status_code, "message": str(e)})
        except openai.APIError as e:
            seen.append({"error": type(e).__name__, "message": str(e)})
    print(json.dumps(seen))


main()
