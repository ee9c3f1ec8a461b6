"""talaria's host interfaces the Python way: part of your project, written by `talaria plugin new`.

    import talaria
    talaria.log.info("starting")
    units = talaria.config.get("units", "metric")      # [plugins.NAME.config], JSON-decoded
    talaria.kv.set_json("last", {"city": "Oslo"})      # needs `kv = true`
    reply = talaria.fetch("https://api.example.com/v1/now",
                          headers={"authorization": "Bearer " + talaria.secret("API_KEY")})
    reply.status, reply.text(), reply.json()

A host call that talaria refuses, or that fails, raises `talaria.TalariaError`; `str(e)` is
talaria's own message, which names what was missing and how to grant it. The template's exports
pass it on to the host as the call's error. Nothing here is needed: the raw bindings are under
`wit_world.imports` (see wit/ and `componentize-py -d wit -w WORLD bindings .`).

`@talaria.export` on an export class checks what each of its methods returns against the
contract in wit/: a wrong type fails the call with a message naming the method, the type it must
return and where the method is, instead of a panic in the bindings. `talaria.describe(e)` is an
exception as one line with the file and line it was raised at, for a tool's error.
"""

import dataclasses as _dataclasses
import functools as _functools
import json as _json
import re as _re
import typing as _typing

from componentize_py_types import Err, Ok
from wit_world.imports import config as _config
from wit_world.imports import kv as _kv
from wit_world.imports import llm as _llm
from wit_world.imports import log as _log
from wit_world.imports import outgoing_handler as _outgoing
from wit_world.imports import process as _process
from wit_world.imports import secrets as _secrets
from wit_world.imports import streams as _streams
from wit_world.imports import talaria_plugin_types as _types
from wit_world.imports import wasi_http_types as _http


class TalariaError(Exception):
    """A host call talaria refused, or that failed. `str(e)` is talaria's message, with the fix."""


def message_of(value) -> str:
    """The text of an error value: a string, or a variant case carrying one."""
    inner = getattr(value, "value", value)
    if isinstance(inner, str):
        return inner
    name = type(value).__name__.split("_", 1)[-1]
    return name if inner is None else f"{name}: {inner}"


def _host(function, *args):
    try:
        return function(*args)
    except Err as e:
        raise TalariaError(message_of(e.value)) from None


class _Log:
    """Lines in talaria's log, tagged with the plugin's name (`talaria -v` shows info)."""

    def debug(self, message: str) -> None:
        _log.log(_log.Level.DEBUG, message)

    def info(self, message: str) -> None:
        _log.log(_log.Level.INFO, message)

    def warn(self, message: str) -> None:
        _log.log(_log.Level.WARN, message)

    def error(self, message: str) -> None:
        _log.log(_log.Level.ERROR, message)


class _Config:
    """The operator's `[plugins.NAME.config]` table in config.toml (no capability needed)."""

    def get(self, key: str, default=None):
        raw = _config.get(key)
        return default if raw is None else _json.loads(raw)


class _Kv:
    """Private persistent storage (`kv = true`): bytes under string keys, with typed helpers.

    Several talaria processes may run the plugin at once: count with `increment`, create one
    key per item with `create`, and change a shared value with `compare_and_set`.
    """

    def get(self, key: str) -> bytes | None:
        return _host(_kv.get, key)

    def get_text(self, key: str, default: str | None = None) -> str | None:
        value = self.get(key)
        return default if value is None else value.decode()

    def get_json(self, key: str, default=None):
        value = self.get(key)
        return default if value is None else _json.loads(value)

    def set(self, key: str, value: bytes | str) -> None:
        _host(_kv.set, key, value.encode() if isinstance(value, str) else value)

    def set_json(self, key: str, value) -> None:
        self.set(key, _json.dumps(value))

    def create(self, key: str, value: bytes | str) -> bool:
        """Set `key` only if nobody has: False when it existed."""
        return _host(_kv.compare_and_set, key, None, value.encode() if isinstance(value, str) else value)

    def compare_and_set(self, key: str, expected: bytes | None, new: bytes | None) -> bool:
        return _host(_kv.compare_and_set, key, expected, new)

    def increment(self, key: str, delta: int = 1) -> int:
        return _host(_kv.increment, key, delta)

    def delete(self, key: str) -> None:
        _host(_kv.delete, key)

    def keys(self, prefix: str = "") -> list[str]:
        return _host(_kv.list_keys, prefix)

    def items(self, prefix: str = "") -> list[tuple[str, bytes]]:
        return _host(_kv.list_with_values, prefix)

    def items_json(self, prefix: str = "") -> list[tuple[str, object]]:
        """`(key, value)` for each key under `prefix`, sorted, each value JSON-decoded."""
        return [(key, _json.loads(value)) for key, value in self.items(prefix)]


log = _Log()
config = _Config()
kv = _Kv()


def secret(name: str) -> str:
    """The placeholder for secret `name`: put it in a request header; talaria fills it in only
    on requests to the host it was granted for, and the plugin never sees the value."""
    return "{{secret:" + name + "}}"


def has_secret(name: str) -> bool:
    """Whether secret `name` is granted to this plugin and has a value."""
    return _secrets.exists(name)


def run(command: str, cwd: str | None = None, timeout_ms: int | None = None):
    """Run a shell command in the workspace (`process = true`), after talaria's
    dangerous-command check: an output with `exit_code`, `stdout`, `stderr`."""
    return _host(_process.run, _process.Command(command, cwd, timeout_ms))


def complete(prompt: str, purpose: str = "plugin", system: str | None = None, max_tokens: int | None = None) -> str:
    """Ask the operator's auxiliary model (`llm = true`); returns its answer."""
    messages = [] if system is None else [_llm.LlmMessage(_types.Role.SYSTEM, system)]
    messages.append(_llm.LlmMessage(_types.Role.USER, prompt))
    return _host(_llm.complete, _llm.Request(purpose, messages, max_tokens, None)).text


class Response:
    """An HTTP response, read whole."""

    def __init__(self, url: str, status: int, headers: list[tuple[str, bytes]], body: bytes):
        self.url, self.status, self.body = url, status, body
        self.headers = {name.lower(): value.decode(errors="replace") for name, value in headers}

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self):
        return _json.loads(self.body)

    def raise_for_status(self) -> "Response":
        if not self.ok:
            raise TalariaError(f"{self.url} answered {self.status}: {self.text()[:300]}")
        return self


_METHODS = {
    "GET": _http.Method_Get,
    "HEAD": _http.Method_Head,
    "POST": _http.Method_Post,
    "PUT": _http.Method_Put,
    "DELETE": _http.Method_Delete,
    "PATCH": _http.Method_Patch,
    "OPTIONS": _http.Method_Options,
}


def fetch(url: str, method: str = "GET", headers: dict[str, str] | None = None, body: bytes | str | None = None,
          json=None) -> Response:
    """An HTTP request (`network = ["HOST"]` in plugin.toml), answered whole.

    `json=` sends a JSON body with its content type. Raises TalariaError when talaria refuses
    the request (a host not granted: talaria adds which grant is missing to the call's error) or
    it fails; an answer with any status is a Response.
    """
    headers = dict(headers or {})
    if json is not None:
        body = _json.dumps(json)
        headers.setdefault("content-type", "application/json")
    if isinstance(body, str):
        body = body.encode()
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise TalariaError(f"cannot fetch {url!r}: the URL must start with https:// or http://")
    authority, slash, path = rest.partition("/")
    try:
        fields = _http.Fields.from_list([(k.lower(), v.encode()) for k, v in headers.items()])
    except Err as e:
        raise TalariaError(f"cannot fetch {url}: a header is not allowed ({message_of(e.value)})") from None
    request = _http.OutgoingRequest(fields)
    request.set_method(_METHODS.get(method.upper(), lambda: _http.Method_Other(method))())
    request.set_scheme(_http.Scheme_Https() if scheme == "https" else _http.Scheme_Http())
    request.set_authority(authority)
    request.set_path_with_query("/" + path if slash else "/")
    outgoing = request.body()
    try:
        future = _outgoing.handle(request, None)
    except Err as e:
        raise TalariaError(f"{method} {url} was refused: {message_of(e.value)}") from None
    with outgoing.write() as stream:
        data = body or b""
        while data:
            stream.blocking_write_and_flush(data[:4096])
            data = data[4096:]
    _http.OutgoingBody.finish(outgoing, None)
    with future.subscribe() as ready:
        ready.block()
    outcome = future.get()
    if not isinstance(outcome, Ok) or not isinstance(outcome.value, Ok):
        why = outcome.value.value if isinstance(outcome, Ok) else outcome
        raise TalariaError(f"{method} {url} failed: {message_of(why)}")
    # Resources are dropped child first: the stream, then the body, then the response.
    with outcome.value.value as response:
        with response.headers() as fields:
            received = fields.entries()
        with response.consume() as incoming:
            with incoming.stream() as stream:
                data = b""
                while True:
                    try:
                        data += stream.blocking_read(64 * 1024)
                    except Err as e:
                        if isinstance(e.value, _streams.StreamError_Closed):
                            break
                        raise TalariaError(f"{method} {url}: the answer broke off: {message_of(e.value)}") from None
        return Response(url, response.status(), received, data)


# --- What exports return, checked against wit/ ----------------------------------------------

_PROJECT_FILE = _re.compile(r"^/\d+/")


def _where(filename: str) -> str:
    """A file of the project as the author knows it: componentize-py shows `app.py` as `/0/app.py`."""
    return _PROJECT_FILE.sub("", filename)


def _authors_frame(tb):
    """The last frame of a traceback in the author's own files (not this one, the bindings or
    Python's library); else the last frame."""
    last = mine = None
    while tb is not None:
        last = tb
        name = tb.tb_frame.f_code.co_filename
        if _PROJECT_FILE.match(name) and _where(name) not in ("talaria.py",) and "wit_world" not in name:
            mine = tb
        tb = tb.tb_next
    return mine or last


def describe(error: BaseException) -> str:
    """`KeyError: 'temperature' (app.py, line 12, in weather)`: the exception, and where in your
    code it was raised."""
    text = f"{type(error).__name__}: {error}"
    frame = _authors_frame(error.__traceback__)
    if frame is None:
        return text
    code = frame.tb_frame.f_code
    return f"{text} ({_where(code.co_filename)}, line {frame.tb_lineno}, in {code.co_name})"


def _alias(t):
    """The name the bindings give a union (`Decision`), if they give it one."""
    import sys

    for arg in _typing.get_args(t):
        module = sys.modules.get(getattr(arg, "__module__", ""))
        for name, value in vars(module or object).items():
            if value == t and not name.startswith("_"):
                return name
    return None


def _type_name(t) -> str:
    """A type as it is written in Python: `list[ToolSpec]`, `str | None`, `Decision (one of
    Decision_Proceed, Decision_Block)`."""
    origin, args = _typing.get_origin(t), _typing.get_args(t)
    if origin is _typing.Union:
        alias = _alias(t) if type(None) not in args else None
        members = " | ".join(_type_name(a) for a in args)
        return f"{alias} (one of {members.replace(' | ', ', ')})" if alias else members
    if origin in (list, _typing.List):
        return f"list[{_type_name(args[0])}]" if args else "list"
    if origin in (tuple, _typing.Tuple):
        return f"tuple[{', '.join(_type_name(a) for a in args)}]"
    if t is type(None):
        return "None"
    return getattr(t, "__name__", str(t))


def _value_name(value) -> str:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _wrong(value, t, path: str, hint: str = "") -> str:
    if not path:
        return f"it returned {_value_name(value)}{hint}"
    return f"in what it returned, {path} is {_value_name(value)}, not {_type_name(t)}{hint}"


def _mismatch(value, t, path: str = ""):
    """Why `value` is not a `t` (`path` says where it is in what was returned), or None when it is."""
    origin, args = _typing.get_origin(t), _typing.get_args(t)
    if t is _typing.Any:
        return None
    if origin is _typing.Union:
        if any(_mismatch(value, a, path) is None for a in args):
            return None
        return _wrong(value, t, path)
    if origin in (list, _typing.List):
        if not isinstance(value, list):
            return _wrong(value, t, path)
        for i, item in enumerate(value):
            why = _mismatch(item, args[0], f"{path}[{i}]") if args else None
            if why:
                return why
        return None
    if origin in (tuple, _typing.Tuple):
        if not isinstance(value, tuple) or len(value) != len(args):
            return _wrong(value, t, path)
        for i, (item, a) in enumerate(zip(value, args)):
            why = _mismatch(item, a, f"{path}[{i}]")
            if why:
                return why
        return None
    if t is type(None):
        return None if value is None else _wrong(value, t, path)
    if t is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif t is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif t is bytes:
        ok = isinstance(value, (bytes, bytearray))
    elif isinstance(t, type):
        ok = isinstance(value, t)
    else:
        return None  # a type this check does not know: the bindings decide
    if not ok:
        hint = " (use json.dumps)" if t is str and isinstance(value, (dict, list)) else ""
        return _wrong(value, t, path, hint)
    if _dataclasses.is_dataclass(t):
        hints = _typing.get_type_hints(t)
        for field in _dataclasses.fields(t):
            why = _mismatch(getattr(value, field.name), hints.get(field.name, _typing.Any), f"{path}.{field.name}" if path else field.name)
            if why:
                return why
    return None


def _raise_at(error: BaseException, code) -> None:
    """Raise `error` from the first line of the author's function `code`: the last frame of its
    traceback, which talaria shows, is then the author's file and line, not this one's."""
    line = max(code.co_firstlineno, 2)
    source = "\n" * (line - 2) + f"def {code.co_name}(error):\n    raise error\n"
    scope = {}
    exec(compile(source, code.co_filename, "exec"), scope)
    scope[code.co_name](error)


def _checked(owner: str, name: str, method, expected):
    label = f"{owner}.{name}"
    inner = method
    while hasattr(inner, "__wrapped__"):  # the author's own decorators
        inner = inner.__wrapped__
    code = inner.__code__

    @_functools.wraps(method)
    def call(self, *args, **kwargs):
        result = method(self, *args, **kwargs)
        why = _mismatch(result, expected)
        if why is not None:
            message = (
                f"{label} ({_where(code.co_filename)}, line {code.co_firstlineno}) must return {_type_name(expected)}, "
                f"but {why}"
            )
            _raise_at(TypeError(message), code)
        return result

    return call


def export(cls):
    """Check what the methods of an export class (`class Tools(exports.Tools)`) return against the
    types of wit/: a wrong one fails the call with `TypeError: Tools.list (app.py, line 40) must
    return list[ToolSpec], but in what it returned, [0].parameters is dict {...}, not str (use
    json.dumps)`. A pre_tool_call hook that fails blocks the call."""
    for base in cls.__mro__[1:]:
        for name, contract in vars(base).items():
            if name.startswith("_") or name not in vars(cls) or not callable(contract):
                continue
            expected = getattr(contract, "__annotations__", {}).get("return", _typing.Any)
            if isinstance(expected, str):
                try:
                    expected = _typing.get_type_hints(contract).get("return", _typing.Any)
                except Exception:
                    expected = _typing.Any
            setattr(cls, name, _checked(cls.__name__, name, vars(cls)[name], expected))
    return cls
