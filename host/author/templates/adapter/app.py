"""A talaria platform adapter (API 0.3.0).

The host keeps one instance per configured account and drives it: `connect` once, `poll` in a
loop when the account polls, `handle_webhook` for requests to the account's routes, `send` and
`edit` for replies. This one serves a webhook route: each POSTed JSON message goes to the agent,
and the reply goes back in the HTTP response. A function whose WIT result is an error raises
`componentize_py_types.Err` instead of returning it. `talaria.py`, beside this file, wraps the
host's interfaces (log, config, kv, `fetch` for the platform's API, secrets, ...).

Import every module you need here, at the top: the component is a snapshot of this file after
it ran, and a module first imported inside a call cannot be found.
"""

import json

import talaria
from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.adapter import (
    Account,
    AdapterError_Permanent,
    Chat,
    ChatType,
    Event_Message,
    Message,
    Outbound,
    Request,
    Response,
    TextFormat,
    WebhookResult,
)


def json_response(status: int, body: dict) -> Response:
    return Response(status, [("content-type", "application/json")], json.dumps(body).encode())


@talaria.export  # a wrong return type fails the call naming the method and the type it must return
class Adapter(exports.Adapter):
    def connect(self) -> Account:
        # A real platform: log in here (its token in a header as "Bearer {{secret:PLATFORM_TOKEN}}").
        return Account("{{name}}", "{{name}}", TextFormat.PLAIN, 4000, False, 1000, False, False)

    def poll(self, timeout_ms: int) -> list:
        # A polling platform: wait up to `timeout_ms` for its new messages and return them.
        return []

    def handle_webhook(self, request: Request) -> WebhookResult:
        try:
            posted = json.loads(bytes(request.body))
        except ValueError as e:
            return WebhookResult(json_response(400, {"error": f'expected {{"chat", "user", "text"}}: {e}'}), [])
        talaria.log.info(f"a message from {posted.get('user')} in {posted.get('chat')}")
        message = Message(
            str(posted.get("id") or f"{posted.get('chat')}-{len(request.body)}"),
            str(posted.get("chat", "")),
            ChatType.DM,
            "",
            None,
            str(posted.get("user", "")),
            str(posted.get("name", "")),
            str(posted.get("text", "")),
            True,
            None,
            [],
        )
        # No response: the host answers the request with the agent's reply.
        return WebhookResult(None, [Event_Message(message)])

    def send(self, message: Outbound) -> str:
        # A real platform: post the message to its API and return the new message's id.
        raise Err(AdapterError_Permanent("this adapter answers in the HTTP response only"))

    def edit(self, message_id: str, message: Outbound) -> None:
        raise Err(AdapterError_Permanent("this adapter cannot edit messages"))

    def typing(self, chat_id: str, thread_id: str | None) -> None:
        return None

    def chat_info(self, chat_id: str) -> Chat:
        return Chat(chat_id, chat_id, ChatType.DM)
