"""The command line's parameter types and helpers: MLproject passes every parameter, and an
empty string means "not given" (the spec's value). Kept apart from the commands
(tracker/cli/study.py, tracker/cli/deploy.py) so they stay readable."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import click

Options = TypeVar("Options")


def packed(options: Callable[..., Options]) -> Callable[[Callable[[Options], None]],
                                                        Callable[..., None]]:
    """A command that takes its options as one value: click passes each option as a keyword,
    ``options`` (a frozen dataclass with a typed field per option) holds them."""
    def pack(command: Callable[[Options], None]) -> Callable[..., None]:
        @functools.wraps(command)
        def call(**given: Any) -> None:
            command(options(**given))
        return call
    return pack


class OptionalChoice(click.Choice):  # type: ignore[type-arg]
    """A choice that also takes "" (an MLproject parameter left empty means "the spec's
    value"), without showing the empty string in the help text."""

    def __init__(self, choices: Sequence[str]) -> None:
        super().__init__(["", *choices])

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + "|".join(str(c) for c in self.choices if c) + "]"

    def get_invalid_choice_message(self, value: Any, ctx: click.Context | None) -> str:
        shown = ", ".join(repr(c) for c in self.choices if c)
        return f"{value!r} is not one of {shown} (or empty for the spec's value)"


VERSION_OF = ("triton-tracker", "nvidia-pytriton", "numpy", "onnxruntime", "mlflow", "optuna",
               "tritonclient")


def print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``tracker --version``: this package and the versions that decide how it measures."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in VERSION_OF:
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} not installed")
    py = ".".join(str(v) for v in sys.version_info[:3])
    click.echo(f"tracker {found[0].split()[-1]} ({', '.join(found[1:])}; Python {py})")
    ctx.exit()


class OptionalNumber(click.ParamType):  # type: ignore[type-arg]
    """An int/float option where "" means "not given" (MLproject parameters default to "")."""

    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.name = kind.__name__

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, self.kind):
            return value
        if str(value).strip() == "":
            return None
        try:
            return self.kind(value)
        except ValueError:
            self.fail(f"{value!r} is not a valid {self.name}", param, ctx)


def blank(value: str | None) -> str | None:
    return value if value not in (None, "") else None


def gpu_list(text: str | None) -> list[int] | str | None:
    """``--gpus``: '' -> None (the spec's), 'all', or '0,1' -> [0, 1]."""
    if not text:
        return None
    if text.strip() == "all":
        return "all"
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"must be 'all' or GPU indices like '0,1', but got {text!r}",
                                 param_hint="--gpus") from None


#: MLflow's own HTTP settings (its environment variables), with the values the commands use
#: where the user set none: 3 retries (at once, then after 2 and 4 s, each plus up to 1 s of
#: jitter) and 30 s per request, so that a tracking server that refuses connections is
#: reported in about 10 s and one that does not answer in about 2 minutes (MLflow's own
#: defaults: 7 retries, 120 s per request, minutes before a closed port is reported). These
#: bound each try; ``tune`` and ``confirm`` try again for longer (tracker/tracking/patience.py).
MLFLOW_HTTP_DEFAULTS: dict[str, str] = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


@contextlib.contextmanager
def mlflow_http_env() -> Iterator[dict[str, str]]:
    """:data:`MLFLOW_HTTP_DEFAULTS` in the environment for the command, each only where the
    user has not set that variable (a value they set, even MLflow's own default, wins);
    removed afterwards, so that commands run in-process leave the environment as they found
    it. Yields what was applied. MLflow reads these variables at each request, and the
    processes a command starts inherit them."""
    import os

    applied = {k: v for k, v in MLFLOW_HTTP_DEFAULTS.items() if not os.environ.get(k)}
    os.environ.update(applied)
    try:
        yield applied
    finally:
        for key, value in applied.items():
            if os.environ.get(key) == value:
                os.environ.pop(key, None)


@contextlib.contextmanager
def tracking_uri_env(uri: str | None) -> Iterator[str]:
    """MLflow's tracking and registry URI for the command (through the environment, restored
    afterwards, so that commands run in-process leave no global MLflow state behind)."""
    import os

    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    os.environ["MLFLOW_TRACKING_URI"] = uri
    if not saved["MLFLOW_REGISTRY_URI"] or saved["MLFLOW_TRACKING_URI"] != uri:
        os.environ["MLFLOW_REGISTRY_URI"] = uri
    try:
        yield uri
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
