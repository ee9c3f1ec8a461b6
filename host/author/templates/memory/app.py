"""A talaria memory provider: it keeps each finished turn and recalls the earlier ones that share
words with the user's new message.

One provider is active at a time (`[memory] provider = "{{name}}"` in config.toml). The host keeps
one instance alive across calls, but anything that must outlive it goes in kv. `talaria.py`,
beside this file, wraps the host's interfaces; a host call talaria refuses raises
`talaria.TalariaError`, which the wrapper below hands to the host as the call's error.

Import every module you need here, at the top: the component is a snapshot of this file after
it ran, and a module first imported inside a call cannot be found.
"""

import functools
import re

import talaria
from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.talaria_plugin_types import CallContext, Message, SessionInfo, ToolError_UnknownTool, ToolSpec

# Words too common to say two messages are about the same thing.
COMMON = set("the and for are but not you your with this that what have was were from they them about into".split())
# At most this many earlier turns are recalled for one message.
RECALLED = 3


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9']+", text.lower()) if len(w) > 2 and w not in COMMON}


def failing(function):
    """Hand any exception to the host as the call's error (a string naming the exception and
    where in your code it was raised), never a crash."""

    @functools.wraps(function)
    def wrapped(*args):
        try:
            return function(*args)
        except talaria.TalariaError as e:
            raise Err(str(e)) from None
        except Err:
            raise
        except Exception as e:
            raise Err(talaria.describe(e)) from None

    return wrapped


@talaria.export  # a wrong return type fails the call naming the method and the type it must return
class Memory(exports.Memory):
    @failing
    def system_prompt_block(self, session: SessionInfo) -> str:
        return ""

    @failing
    def prefetch(self, query: str, session: SessionInfo) -> str:
        wanted = words(query)
        if not wanted:
            return ""
        scored = []
        for key, turn in talaria.kv.items_json("turn/"):
            shared = len(wanted & words(turn["user"] + " " + turn["assistant"]))
            if shared:
                scored.append((shared, key, turn))
        scored.sort(key=lambda s: (-s[0], s[1]))
        if not scored:
            return ""
        lines = [f"- the user said: {t['user']} (you answered: {t['assistant'][:200]})" for _, _, t in scored[:RECALLED]]
        talaria.log.debug(f"recalled {len(lines)} turns")
        return "From earlier conversations:\n" + "\n".join(lines)

    @failing
    def sync_turn(self, user: str, assistant: str, session: SessionInfo) -> None:
        # One key per turn, numbered by an atomic counter: two talaria processes never collide.
        n = talaria.kv.increment("turns")
        talaria.kv.set_json(f"turn/{n:012}", {"user": user, "assistant": assistant, "session": session.session_id})

    @failing
    def on_pre_compress(self, messages: list[Message], session: SessionInfo) -> str:
        return ""

    @failing
    def on_session_end(self, messages: list[Message], session: SessionInfo) -> None:
        return None

    @failing
    def on_memory_write(self, action: str, target: str, content: str, session: SessionInfo) -> None:
        return None


@talaria.export
class Tools(exports.Tools):
    """A memory provider may offer tools too; this one offers none."""

    def list(self) -> list[ToolSpec]:
        return []

    def call(self, name: str, args_json: str, context: CallContext) -> str:
        raise Err(ToolError_UnknownTool(name))
