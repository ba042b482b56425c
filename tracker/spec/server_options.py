"""``server.options``: the tritonserver flags a study sets, typed, and the ``server/<option>``
knobs that search them (docs/server-options.md).

A server option cannot change while the server runs: a trial whose options differ from the
running server's restarts it (tracker/triton/server/launcher.py), whatever ``server.strategy``
says. The typed options and the flags they become:

- ``cache_size`` (bytes): ``--cache-config=local,size=N`` (Triton's response cache; a model
  uses it with ``response_cache.enable: true``);
- ``rate_limit`` (``off`` | ``execution_count``): ``--rate-limit=...``, and
  ``rate_limit_resources`` ({NAME: COUNT}): one ``--rate-limit-resource=NAME:COUNT`` each;
- ``backend_config`` ({backend: {key: value}}): ``--backend-config=backend,key=value``;
- ``pinned_memory_pool_byte_size``, ``model_load_thread_count``: the flags of those names;
- ``cuda_memory_pool_byte_size``: ``--cuda-memory-pool-byte-size=<gpu>:N`` for each GPU the
  server is given;
- ``flags`` ({"--name": value}): any other tritonserver flag, passed as ``--name=value`` (a
  null value: ``--name``); refused at ``tracker check`` when the server's own ``--help`` does
  not list it.

Knobs: ``server/cache_size``, ``server/rate_limit``, ``server/model_load_thread_count``,
``server/pinned_memory_pool_byte_size``, ``server/cuda_memory_pool_byte_size``,
``server/rate_limit_resources.NAME``, ``server/backend_config.BACKEND.KEY``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal, NamedTuple

from pydantic import Field, field_validator

from tracker.spec.fields import ConfigField, enum_name
from tracker.spec.messages import problem, show
from tracker.spec.model_section import SpecModel

SERVER_PREFIX = "server/"
Scalar = bool | int | float | str
NonNeg = Annotated[int, Field(ge=0)]
RATE_LIMIT_MODES = ("off", "execution_count")

#: flags the launchers set themselves (ports, repository, model control): never from a spec
OWN_FLAGS = frozenset({
    "--model-repository", "--model-store", "--http-port", "--grpc-port", "--metrics-port",
    "--http-address", "--grpc-address", "--metrics-address", "--model-control-mode",
    "--backend-directory", "--exit-timeout-secs", "--disable-auto-complete-config",
    "--cache-directory", "--strict-model-config"})
#: flags a typed option sets: the flag -> the option to use instead
TYPED_FLAGS = {"--cache-config": "cache_size", "--rate-limit": "rate_limit",
               "--rate-limit-resource": "rate_limit_resources",
               "--backend-config": "backend_config",
               "--pinned-memory-pool-byte-size": "pinned_memory_pool_byte_size",
               "--cuda-memory-pool-byte-size": "cuda_memory_pool_byte_size",
               "--model-load-thread-count": "model_load_thread_count"}
_FLAG = re.compile(r"--[a-z][a-z0-9-]*")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")

class KnobLine(NamedTuple):
    path: str
    what: str
    values: str


#: the server knobs as ``tracker check`` lists them: (knob, what it sets, its values)
SERVER_KNOBS = tuple(KnobLine(*row) for row in (
    ("server/cache_size", "response cache bytes (--cache-config local)", "int >= 0"),
    ("server/rate_limit", "rate limiter (--rate-limit)", "off, execution_count"),
    ("server/rate_limit_resources.NAME", "a resource's count (--rate-limit-resource)",
     "int >= 1"),
    ("server/backend_config.BACKEND.KEY", "a backend setting (--backend-config)",
     "e.g. onnxruntime enable-global-threadpool"),
    ("server/pinned_memory_pool_byte_size", "pinned memory pool", "int >= 0"),
    ("server/cuda_memory_pool_byte_size", "CUDA memory pool of each GPU", "int >= 0"),
    ("server/model_load_thread_count", "threads loading models", "int >= 1")))

#: the scalar options a knob may search, and the least value each takes (None: a choice)
_SCALARS: dict[str, int | None] = {
    "cache_size": 0, "pinned_memory_pool_byte_size": 0, "cuda_memory_pool_byte_size": 0,
    "model_load_thread_count": 1, "rate_limit": None}


class ServerOptions(SpecModel):
    """The tritonserver flags of a study (module docstring)."""

    cache_size: NonNeg | None = None
    """Response cache bytes: --cache-config local,size=N (models enable it per config)."""
    rate_limit: Literal["off", "execution_count"] | None = None
    """The rate limiter: --rate-limit (execution_count: instances wait for resources)."""
    rate_limit_resources: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    """Resource counts the rate limiter hands out: --rate-limit-resource=NAME:COUNT."""
    backend_config: dict[str, dict[str, Scalar]] = Field(default_factory=dict)
    """Per backend settings: --backend-config=BACKEND,KEY=VALUE."""
    pinned_memory_pool_byte_size: NonNeg | None = None
    """Pinned host memory pool bytes: --pinned-memory-pool-byte-size."""
    cuda_memory_pool_byte_size: NonNeg | None = None
    """CUDA memory pool bytes of each GPU: --cuda-memory-pool-byte-size=GPU:N."""
    model_load_thread_count: Annotated[int, Field(ge=1)] | None = None
    """Threads that load models: --model-load-thread-count."""
    flags: dict[str, Scalar | None] = Field(default_factory=dict)
    """Any other tritonserver flag (checked against the server's --help; None: no value)."""

    @field_validator("rate_limit_resources", "backend_config")
    @classmethod
    def _names(cls, value: dict[str, object]) -> dict[str, object]:
        for key in value:
            if not _NAME.fullmatch(key):
                raise problem(f"a name of letters, digits, '_', '.' or '-', but got {show(key)}",
                              key)
        return value

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: dict[str, Scalar | None]) -> dict[str, Scalar | None]:
        for flag in value:
            if not _FLAG.fullmatch(flag):
                raise problem(f"a tritonserver flag such as '--log-verbose', but got "
                              f"{show(flag)}", flag)
            if flag in OWN_FLAGS:
                raise problem(f"{flag} is set by the launcher itself (ports, repository, model "
                              "control); it cannot be given", flag)
            if flag in TYPED_FLAGS:
                raise problem(f"{flag} has its own option: use server.options."
                              f"{TYPED_FLAGS[flag]}", flag)
        return value

    def with_values(self, values: Mapping[str, object]) -> ServerOptions:
        """These options with a trial's ``server/<option>`` values set (others ignored)."""
        data = self.model_dump()
        for key, value in values.items():
            if not key.startswith(SERVER_PREFIX):
                continue
            name, _, rest = key[len(SERVER_PREFIX):].partition(".")
            if name == "rate_limit_resources":
                data[name][rest] = value
            elif name == "backend_config":
                backend, _, option = rest.partition(".")
                data[name].setdefault(backend, {})[option] = value
            elif name == "rate_limit" and isinstance(value, str):
                found = enum_name([m.upper() for m in RATE_LIMIT_MODES], value)
                data[name] = found.lower() if found else value
            else:
                data[name] = value
        return ServerOptions.model_validate(data)

    def value_of(self, key: str) -> object:
        """The value knob ``server/<option>`` has in these options (None: unset)."""
        name, _, rest = key[len(SERVER_PREFIX):].partition(".")
        if name == "rate_limit_resources":
            return self.rate_limit_resources.get(rest)
        if name == "backend_config":
            backend, _, option = rest.partition(".")
            return self.backend_config.get(backend, {}).get(option)
        return getattr(self, name, None)

    def args(self, gpus: int = 1) -> list[str]:
        """The tritonserver flags; ``gpus``: how many GPUs the server sees (for the CUDA
        pool, one flag per device)."""
        out: list[str] = []
        if self.cache_size is not None:
            out.append(f"--cache-config=local,size={self.cache_size}")
        if self.rate_limit is not None:
            out.append(f"--rate-limit={self.rate_limit}")
        out.extend(f"--rate-limit-resource={name}:{count}"
                   for name, count in sorted(self.rate_limit_resources.items()))
        for backend, settings in sorted(self.backend_config.items()):
            out.extend(f"--backend-config={backend},{key}={_text(value)}"
                       for key, value in sorted(settings.items()))
        if self.pinned_memory_pool_byte_size is not None:
            out.append(f"--pinned-memory-pool-byte-size={self.pinned_memory_pool_byte_size}")
        if self.cuda_memory_pool_byte_size is not None:
            out.extend(f"--cuda-memory-pool-byte-size={gpu}:{self.cuda_memory_pool_byte_size}"
                       for gpu in range(max(gpus, 1)))
        if self.model_load_thread_count is not None:
            out.append(f"--model-load-thread-count={self.model_load_thread_count}")
        out.extend(flag if value is None else f"{flag}={_text(value)}"
                   for flag, value in self.flags.items())
        return out

    def is_set(self) -> bool:
        return bool(self.args())


def _text(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def server_knob(key: str) -> bool:
    """Whether search.space key ``key`` is a server option (``server/<option>``)."""
    return key.startswith(SERVER_PREFIX)


def server_knob_problem(key: str) -> str | None:
    """Why ``key`` (``server/...``) names no searchable server option; None when it does."""
    name, _, rest = key[len(SERVER_PREFIX):].partition(".")
    if name in _SCALARS and not rest:
        return None
    if name == "rate_limit_resources" and _NAME.fullmatch(rest):
        return None
    if name == "backend_config" and "." in rest:
        backend, _, option = rest.partition(".")
        if _NAME.fullmatch(backend) and option:
            return None
    known = [*(f"server/{n}" for n in _SCALARS), "server/rate_limit_resources.NAME",
             "server/backend_config.BACKEND.KEY"]
    return f"unknown server option knob; the server knobs are {', '.join(known)}"


def server_field(key: str) -> ConfigField:
    """The value kind of server knob ``key`` (for the space's value checks)."""
    name = key[len(SERVER_PREFIX):].partition(".")[0]
    if name == "rate_limit":
        return ConfigField(path=key, kind="enum", repeated=False,
                           enum_names=tuple(m.upper() for m in RATE_LIMIT_MODES))
    if name == "backend_config":
        return ConfigField(path=key, kind="param", repeated=False)
    least = _SCALARS.get(name, 1)
    return ConfigField(path=key, kind="int", repeated=False, minimum=least)


def server_knobs(keys: Sequence[str]) -> list[str]:
    """The server option knobs among ``keys``."""
    return [k for k in keys if server_knob(k)]


def section_problems(restarts: bool, mode: str,
                     options: ServerOptions) -> list[tuple[str, str]]:
    """``server.options`` on a server this study does not start (remote): refused."""
    if restarts or not options.is_set():
        return []
    return [("options", f"cannot be set when server.mode is {mode!r}: its flags are chosen "
                        "by whoever started that server, and changing one needs a restart")]


def study_problems(restarts: bool, mode: str, options: ServerOptions,
                   space: Mapping[str, object]) -> list[tuple[str, str]]:
    """(field path, message) for server knobs a server of ``mode`` cannot take (one that is
    not restarted here: remote), and for a searched response cache without a cache size."""
    items: list[tuple[str, str]] = []
    knobs = server_knobs(list(space))
    if knobs and not restarts:
        items.extend((f"search.space.{k}", f"a server option cannot be searched when "
                      f"server.mode is {mode!r}: that server is someone else's, and a new "
                      "option needs a restart") for k in knobs)
    cached = [k for k in space if k.rpartition("/")[2] == "response_cache.enable"]
    if cached and options.cache_size is None and "server/cache_size" not in space:
        items.extend((f"search.space.{k}", "turns on the response cache, but the server has "
                      "none: set server.options.cache_size (bytes) or search "
                      "server/cache_size") for k in cached)
    return items
