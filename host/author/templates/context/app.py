"""A talaria context engine: when the prompt nears the model's context window, it keeps the last
messages and replaces the rest with a short note of what was dropped.

One engine is active at a time (`[context] engine = "{{name}}"` in config.toml). Settings come
from `[plugins.{{name}}.config]`: `threshold` (the share of the context window that triggers it,
default 0.75) and `keep` (messages kept, default 8). `talaria.py`, beside this file, wraps the
host's interfaces; a host call talaria refuses raises `talaria.TalariaError`.

The history it returns must be a valid conversation: it starts with a user message, roles
alternate properly, and every tool call is followed by its results. The host checks, and keeps
the old history when it is not.

Import every module you need here, at the top: the component is a snapshot of this file after
it ran, and a module first imported inside a call cannot be found.
"""

import dataclasses

import talaria
from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.context import Compressed, CompressRequest, Status
from wit_world.imports.talaria_plugin_types import Role, SessionInfo


def settings() -> tuple[float, int]:
    return float(talaria.config.get("threshold", 0.75)), max(2, int(talaria.config.get("keep", 8)))


def cut(messages: list, keep: int) -> int:
    """Where the kept part starts: a user message, so the history stays valid (0: keep it all)."""
    start = max(0, len(messages) - keep)
    later = [i for i in range(start, len(messages)) if messages[i].role == Role.USER]
    if later:
        return later[0]
    earlier = [i for i in range(0, start) if messages[i].role == Role.USER]
    return earlier[-1] if earlier else 0


@talaria.export  # a wrong return type fails the call naming the method and the type it must return
class Context(exports.Context):
    def should_compress(self, status: Status, session: SessionInfo) -> bool:
        threshold, _ = settings()
        return status.context_length > 0 and status.prompt_tokens >= threshold * status.context_length

    def compress(self, request: CompressRequest) -> Compressed:
        try:
            _, keep = settings()
            messages = request.messages
            start = cut(messages, keep)
            if start == 0:
                return Compressed(messages, "nothing to compress: the history is already short")
            first = next((m.content for m in messages if m.role == Role.USER), "")
            note = [f"[{start} earlier messages were removed to save room. The conversation began with: {first[:300]!r}]"]
            if request.focus:
                note.append(f"[Focus from now on: {request.focus}]")
            if request.memory_context:
                note.append(f"[Memory notes on what was removed: {request.memory_context}]")
            if request.carry:
                note.append(request.carry)
            kept = list(messages[start:])
            kept[0] = dataclasses.replace(kept[0], content="\n".join(note) + "\n\n" + kept[0].content)
            talaria.log.info(f"dropped {start} messages, kept {len(kept)}")
            return Compressed(kept, f"dropped {start} earlier messages, kept the last {len(kept)}")
        except talaria.TalariaError as e:
            raise Err(str(e)) from None
        except Exception as e:
            # The exception and where in your code it was raised: `KeyError: 'x' (app.py, line 9, in cut)`.
            raise Err(talaria.describe(e)) from None

    def report(self, status: Status, session: SessionInfo) -> list[tuple[str, str]]:
        threshold, keep = settings()
        return [("threshold", f"{threshold:.0%} of the context window"), ("keeps", f"the last {keep} messages")]
