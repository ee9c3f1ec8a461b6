"""A talaria hook: before each tool call, it blocks the ones whose arguments contain a phrase
from its list.

plugin.toml's `[hook] events` says which events it gets (`pre_tool_call` here); each call runs
in a fresh instance under a deadline. The list comes from `[plugins.{{name}}.config] block`
(default: "rm -rf" and "DROP TABLE"). A hook can proceed, block, ask for a human's approval,
add context or replace a result; nothing it answers can approve a command or widen a grant.
`talaria.py`, beside this file, wraps the host's interfaces.

Import every module you need here, at the top: the component is a snapshot of this file after
it ran, and a module first imported inside a call cannot be found.
"""

import talaria
from wit_world import exports
from wit_world.exports.hooks import (
    Decision,
    Decision_Block,
    Decision_Proceed,
    Event,
    Event_PreToolCall,
)

DEFAULT_BLOCK = ["rm -rf", "DROP TABLE"]


@talaria.export  # a wrong return type fails the call naming the method and the type it must return
class Hooks(exports.Hooks):
    def on_event(self, event: Event) -> Decision:
        # An exception here (or a wrong return type) fails the call, and a failed hook fails
        # closed: talaria blocks the tool call (pre_tool_call), showing the exception with its
        # file and line; for other events it warns and goes on without this hook's answer. A
        # hook that should let calls through when it breaks must catch and return
        # Decision_Proceed() itself.
        if isinstance(event, Event_PreToolCall):
            call = event.value
            for phrase in talaria.config.get("block", DEFAULT_BLOCK):
                if phrase.lower() in call.arguments.lower():
                    talaria.log.info(f"blocked {call.tool}: {phrase!r}")
                    return Decision_Block(
                        f"{{name}} blocked this {call.tool} call: its arguments contain {phrase!r}. "
                        "Do it another way, or ask the user to change [plugins.{{name}}.config] block."
                    )
        return Decision_Proceed()
