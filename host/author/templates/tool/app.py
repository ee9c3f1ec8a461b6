"""A talaria tool plugin with one tool, `hello`.

The host calls `Tools.list` once to learn the tools, then `Tools.call` each time the model uses
one, in a fresh instance. `talaria.py`, beside this file, wraps the host's interfaces (log,
config, kv, HTTP, secrets, ...); a host call talaria refuses raises `talaria.TalariaError`
with talaria's message. The raw bindings are under `wit_world` (see wit/).

Import every module you need here, at the top: the component is a snapshot of this file after
it ran, and a module first imported inside a call cannot be found.
"""

import json

import talaria
from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.talaria_plugin_types import (
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
    # A host call: this line goes to talaria's log (`talaria -v` shows it).
    talaria.log.info(f"greeting {name}")
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


@talaria.export  # a wrong return type fails the call naming the method and the type it must return
class Tools(exports.Tools):
    def list(self) -> list[ToolSpec]:
        return [ToolSpec(name, run.__doc__ or "", json.dumps(schema)) for name, (run, schema) in TOOLS.items()]

    def call(self, name: str, args_json: str, context: CallContext) -> str:
        if name not in TOOLS:
            raise Err(ToolError_UnknownTool(name))
        run, _ = TOOLS[name]
        try:
            result = run(json.loads(args_json), context)
        except Err as e:
            if isinstance(e.value, (ToolError_Failed, ToolError_InvalidArgs, ToolError_UnknownTool)):
                raise
            # A raw host import refused: its value is talaria's explanation, with the fix.
            raise Err(ToolError_Failed(talaria.message_of(e.value))) from None
        except talaria.TalariaError as e:
            raise Err(ToolError_Failed(str(e))) from None
        except Exception as e:
            # Anything else raised: a failure naming the exception and where in your code it
            # was raised (`KeyError: 'city' (app.py, line 30, in hello)`), for the model and
            # `talaria plugin test`.
            raise Err(ToolError_Failed(talaria.describe(e))) from None
        if not isinstance(result, str):
            got = type(result).__name__
            raise Err(ToolError_Failed(f"tool `{name}` must return a str; got {got} (use json.dumps for data)"))
        return result
