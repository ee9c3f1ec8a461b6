"""A talaria tool plugin with one tool, `hello`.

The host calls `Tools.list` once to learn the tools, then `Tools.call` each time the model uses
one, in a fresh instance. Host imports are modules under `wit_world.imports` (`log`, `config`,
`kv`, ...); `wit/plugin.wit` lists them all. A function whose WIT result is an error raises
`componentize_py_types.Err` instead of returning it.

Import every module you need here, at the top: the component is a snapshot of this file after
it ran, and a module first imported inside a call cannot be found.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import log
from wit_world.imports.types import (
    CallContext,
    ToolError_Failed,
    ToolError_InvalidArgs,
    ToolError_UnknownTool,
    ToolSpec,
)


def hello(args: dict, context: CallContext) -> str:
    """Greet someone by name. Returns the greeting."""
    name = str(args.get("name") or "").strip()
    if not name:
        # The caller's mistake: ToolError_InvalidArgs tells the model to fix its arguments.
        raise Err(ToolError_InvalidArgs("`name` must not be empty: say who to greet"))
    # A host import: this line goes to talaria's log (`talaria -v` shows it).
    log.log(log.Level.INFO, f"greeting {name}")
    return f"Hello, {name}!"


# Each tool: the function (its docstring is the description) and the JSON Schema of its arguments.
TOOLS = {
    "hello": (
        hello,
        {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "Who to greet."}},
            "required": ["name"],
        },
    ),
}


class Tools(exports.Tools):
    def list(self) -> list[ToolSpec]:
        return [ToolSpec(name, run.__doc__ or "", json.dumps(schema)) for name, (run, schema) in TOOLS.items()]

    def call(self, name: str, args_json: str, context: CallContext) -> str:
        if name not in TOOLS:
            raise Err(ToolError_UnknownTool(name))
        run, _ = TOOLS[name]
        try:
            return run(json.loads(args_json), context)
        except Err as e:
            if isinstance(e.value, (ToolError_Failed, ToolError_InvalidArgs, ToolError_UnknownTool)):
                raise
            # A host import refused (kv without its grant, a host never granted...): its value is
            # talaria's own explanation, with the fix. Pass it on as this tool's failure.
            raise Err(ToolError_Failed(str(getattr(e.value, "value", e.value))))
        except Exception as e:
            # Anything else raised would crash the call: report it as a failure instead.
            raise Err(ToolError_Failed(f"{type(e).__name__}: {e}"))
