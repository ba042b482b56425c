"""Where the `triton` deployment target deploys: a Triton server (gRPC ``url``) in explicit model
control mode and its model repository on a local path.

Each setting comes from, in order: the deployment ``config`` (``-C key=value``), the target URI
(``triton:/HOST:PORT`` sets ``url``), an environment variable, the default. ``mlflow deployments
list|get|delete`` take no config in some MLflow versions: use the environment variables there.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tracker.errors import DeployError

ENV: dict[str, str] = {
    "url": "TRACKER_TRITON_URL",
    "repository": "TRACKER_TRITON_REPOSITORY",
    "serving": "TRACKER_TRITON_SERVING",
    "timeout_s": "TRACKER_TRITON_TIMEOUT_S",
    "log": "TRACKER_TRITON_LOG",
}
DEFAULTS: dict[str, str] = {"url": "localhost:8001", "serving": "auto", "timeout_s": "300"}
HELP: dict[str, str] = {
    "url": "gRPC endpoint of the Triton server, host:port (default localhost:8001)",
    "repository": "the server's model repository, a local folder (required)",
    "serving": "auto | native | python: how an ONNX model is served; auto tries the native "
               "onnxruntime backend and falls back to the Python-backend shim when the server "
               "lacks it (and keeps what an existing deployment uses)",
    "timeout_s": "seconds to wait for a version to become READY (default 300)",
    "log": "the server's log file, when this machine can read it (optional): a config Triton "
           "refuses while reading the repository is answered with only 'failed to poll from "
           "model repository'; the reason is taken from this log",
    "version": "create/update only: the Triton version for a model URI that is not a registry "
               "version (models:/NAME/VERSION and models:/NAME@ALIAS use the registry's number)",
}


@dataclass(frozen=True)
class TargetSettings:
    url: str
    repository: Path
    serving: str
    timeout_s: float
    version: int | None = None
    log: Path | None = None

    def describe(self) -> str:
        """What the registry's ``tracker.deploy.target`` tag records."""
        return f"triton:/{self.url} {self.repository}"


def _url_from_target(target_uri: str | None) -> str | None:
    if not target_uri or ":" not in target_uri:
        return None
    rest = target_uri.split(":", 1)[1].lstrip("/")
    return rest or None


def resolve_settings(target_uri: str | None = "triton",
                     config: Mapping[str, object] | None = None) -> TargetSettings:
    """Settings from config, target URI and environment; :class:`DeployError` names the bad
    key or value."""
    config = dict(config or {})
    unknown = sorted(set(config) - set(HELP))
    if unknown:
        hints = [f"{k!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(
            k, list(HELP), n=1)) else "") for k in unknown]
        raise DeployError(f"unknown triton target config {', '.join(hints)}; known keys: "
                          f"{sorted(HELP)}")

    def pick(key: str) -> str | None:
        if config.get(key) not in (None, ""):
            return str(config[key])
        if key == "url" and (from_uri := _url_from_target(target_uri)):
            return from_uri
        if key in ENV and os.environ.get(ENV[key]):
            return os.environ[ENV[key]]
        return DEFAULTS.get(key)

    url = pick("url") or DEFAULTS["url"]
    host, sep, port = url.split("://", 1)[-1].rpartition(":")
    if not sep or not host or not port.isdigit():
        raise DeployError(f"url must be the gRPC endpoint host:port, but got {url!r}")
    repository = pick("repository")
    if not repository:
        raise DeployError("the triton target needs the model repository folder: pass "
                          f"-C repository=PATH or set {ENV['repository']}")
    serving = pick("serving") or "auto"
    if serving not in ("auto", "native", "python"):
        raise DeployError(f"serving must be auto, native or python, but got {serving!r}")
    try:
        timeout_s = float(pick("timeout_s") or DEFAULTS["timeout_s"])
    except ValueError as exc:
        raise DeployError(f"timeout_s must be a number of seconds, but got "
                          f"{pick('timeout_s')!r}") from exc
    if timeout_s <= 0:
        raise DeployError(f"timeout_s must be > 0, but got {timeout_s:g}")
    version: int | None = None
    if (raw := pick("version")) is not None:
        if not str(raw).isdigit() or int(raw) < 1:
            raise DeployError(f"version must be a positive integer, but got {raw!r}")
        version = int(raw)
    log = pick("log")
    return TargetSettings(url=f"{host}:{port}", repository=Path(repository).expanduser(),
                          serving=serving, timeout_s=timeout_s, version=version,
                          log=Path(log).expanduser() if log else None)


def help_text() -> str:
    lines = [
        "Target URI: triton  or  triton:/HOST:PORT (the server's gRPC endpoint).",
        "The server must run in explicit model control mode over a model repository that this",
        "machine can write (a local path). Config keys (-C key=value), with environment",
        "variables as fallback:",
    ]
    for key, text in HELP.items():
        env = f" [{ENV[key]}]" if key in ENV else ""
        lines.append(f"  {key}{env}: {text}")
    lines.append("The deployment name is the Triton model name. See docs/deploy.md.")
    return "\n".join(lines)
