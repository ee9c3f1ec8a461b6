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
"""

import json as _json

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
