"""Where the `triton` deployment target deploys: a Triton server (``url``, gRPC or HTTP) in
explicit model control mode and its model repository on a local path.

Each setting comes from, in order: the deployment ``config`` (``-C key=value``), the target URI
(``triton:/HOST:PORT`` sets ``url``), our environment variable (``TRACKER_TRITON_*``), the one
NVIDIA's mlflow-triton plugin reads (``TRITON_URL``: HTTP ``host:port``, ``https://`` for TLS;
``TRITON_MODEL_REPO``), the default. ``mlflow deployments list|get|delete`` take no config in
some MLflow versions: use the environment variables there.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tracker.errors import DeployError, ServerError
from tracker.redact import redact_url
from tracker.serving import CHOICES as SERVING_CHOICES
from tracker.triton.tls import Security

ENV: dict[str, str] = {
    "url": "TRACKER_TRITON_URL",
    "repository": "TRACKER_TRITON_REPOSITORY",
    "serving": "TRACKER_TRITON_SERVING",
    "timeout_s": "TRACKER_TRITON_TIMEOUT_S",
    "log": "TRACKER_TRITON_LOG",
    "root_cert": "TRACKER_TRITON_ROOT_CERT",
    "client_cert": "TRACKER_TRITON_CLIENT_CERT",
    "client_key": "TRACKER_TRITON_CLIENT_KEY",
    "server_name": "TRACKER_TRITON_SERVER_NAME",
    "headers": "TRACKER_TRITON_HEADERS",
}
#: What NVIDIA's mlflow-triton plugin reads; ours (ENV) win when both are set.
NVIDIA_ENV: dict[str, str] = {"url": "TRITON_URL", "repository": "TRITON_MODEL_REPO"}
DEFAULTS: dict[str, str] = {"url": "localhost:8001", "serving": "auto", "timeout_s": "300"}
NVIDIA_DEFAULT_URL = "http://localhost:8000"  # NVIDIA's default, used in NVIDIA-only setups
HELP: dict[str, str] = {
    "url": "endpoint of the Triton server: host:port or grpc://host:port (gRPC, default "
           "localhost:8001; grpcs:// = TLS), http://host:port or https://host:port (HTTP; "
           "https = TLS). "
           "TRITON_URL (NVIDIA's) is HTTP: host:port means http://host:port",
    "repository": "the server's model repository, a local folder (required; also read from "
                  "TRITON_MODEL_REPO)",
    "serving": "auto | onnxruntime | python: how an ONNX model is served (other formats are "
               "served by the backend their config names); auto tries the "
               "onnxruntime backend and falls back to the Python-backend shim when the server "
               "lacks it (and keeps what an existing deployment uses)",
    "timeout_s": "seconds to wait for a version to become READY (default 300)",
    "log": "the server's log file, when this machine can read it (optional): a config Triton "
           "refuses while reading the repository is answered with only 'failed to poll from "
           "model repository'; the reason is taken from this log",
    "root_cert": "PEM file of the CA that signed the server's certificate (TLS; default: the "
                 "system's CAs)",
    "client_cert": "PEM client certificate for mutual TLS (with client_key)",
    "client_key": "PEM key of client_cert",
    "server_name": "the name the server's certificate carries, when not the url's host",
    "headers": "extra headers on every request, 'name: value; name2: value2' (e.g. a gateway's "
               "authorization)",
    "version": "create/update only: the Triton version for a model URI that is not a registry "
               "version (models:/NAME/VERSION and models:/NAME@ALIAS use the registry's number)",
}


@dataclass(frozen=True)
class TargetSettings:
    url: str  #: host:port
    repository: Path
    serving: str
    timeout_s: float
    version: int | None = None
    log: Path | None = None
    protocol: str = "grpc"  #: "grpc" or "http"
    ssl: bool = False  #: TLS (an https:// or grpcs:// url, or a certificate setting)
    security: Security = field(default_factory=Security)  #: certificates and headers

    @property
    def endpoint(self) -> str:
        """The url with its protocol: ``host:port`` (gRPC) or ``http[s]://host:port``."""
        if self.protocol == "http":
            return f"{'https' if self.ssl else 'http'}://{self.url}"
        return f"grpcs://{self.url}" if self.ssl else self.url

    def describe(self) -> str:
        """What the registry's ``tracker.deploy.target`` tag records."""
        return f"triton:/{self.endpoint} {self.repository}"


def _url_from_target(target_uri: str | None) -> str | None:
    if not target_uri or ":" not in target_uri:
        return None
    rest = target_uri.split(":", 1)[1].lstrip("/")
    return rest or None


def _endpoint(url: str, source: str) -> tuple[str, str, bool]:
    """(host:port, protocol, ssl) of a url; NVIDIA's TRITON_URL without a scheme is HTTP."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = ("http" if source == NVIDIA_ENV["url"] else "grpc"), url
    scheme = scheme.lower()
    if scheme not in ("grpc", "grpcs", "http", "https"):
        raise DeployError(f"url must be host:port, grpc://, http:// or https://host:port, but "
                          f"{source} is {redact_url(url)!r}")
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit() or "/" in host:
        raise DeployError(f"url must be the server's endpoint host:port (gRPC) or "
                          f"http[s]://host:port (HTTP), but {source} is {redact_url(url)!r}")
    return (f"{host}:{port}", "grpc" if scheme.startswith("grpc") else "http",
            scheme in ("https", "grpcs"))


def _local_repository(value: str, source: str) -> Path:
    scheme, sep, rest = value.partition("://")
    if sep and scheme.lower() == "file":
        return Path(rest).expanduser()
    if sep:
        raise DeployError(
            f"the model repository must be a local folder that this machine writes, but "
            f"{source} is {value!r}: {scheme}:// repositories are not supported by this target "
            "(supported: a local path or file:///path, which may be a mounted volume or shared "
            "file system). Mount the bucket (e.g. mountpoint-s3, s3fs) and point both the "
            "server and this setting at the mount")
    return Path(value).expanduser()


def resolve_settings(target_uri: str | None = "triton",
                     config: Mapping[str, object] | None = None,
                     give: str = "pass -C repository=PATH") -> TargetSettings:
    """Settings from config, target URI and environment; :class:`DeployError` names the bad
    key or value and where it came from. ``give``: how the caller's user passes the
    repository (the ``tracker`` commands name their own flags)."""
    config = dict(config or {})
    unknown = sorted(set(config) - set(HELP))
    if unknown:
        hints = [f"{k!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(
            k, list(HELP), n=1)) else "") for k in unknown]
        raise DeployError(f"unknown triton target config {', '.join(hints)}; known keys: "
                          f"{sorted(HELP)}")

    def pick_from(key: str) -> tuple[str | None, str]:
        if config.get(key) not in (None, ""):
            return str(config[key]), f"config {key!r}"
        if key == "url" and (from_uri := _url_from_target(target_uri)):
            return from_uri, f"target URI {target_uri!r}"
        for env in (ENV.get(key), NVIDIA_ENV.get(key)):
            if env and os.environ.get(env):
                return os.environ[env], env
        return DEFAULTS.get(key), "default"

    def pick(key: str) -> str | None:
        return pick_from(key)[0]

    repository, repo_source = pick_from("repository")
    if not repository:
        raise DeployError(f"the triton target needs the model repository folder: {give} "
                          f"or set {ENV['repository']} (or NVIDIA's "
                          f"{NVIDIA_ENV['repository']})")
    url, url_source = pick_from("url")
    if url_source == "default" and repo_source == NVIDIA_ENV["repository"]:
        url = NVIDIA_DEFAULT_URL  # an NVIDIA-only setup gets NVIDIA's default server
    host_port, protocol, ssl = _endpoint(url or DEFAULTS["url"], url_source)
    serving = pick("serving") or "auto"
    if serving not in SERVING_CHOICES:
        raise DeployError(f"serving must be one of {list(SERVING_CHOICES)}, but got "
                          f"{serving!r}")
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
    security = _security(pick, ssl)
    return TargetSettings(url=host_port, repository=_local_repository(repository, repo_source),
                          serving=serving, timeout_s=timeout_s, version=version,
                          log=Path(log).expanduser() if log else None, protocol=protocol,
                          ssl=security.tls, security=security)


def _security(pick: Callable[[str], str | None], ssl: bool) -> Security:
    """TLS when the url says so or a certificate is given; headers 'name: value; ...'."""
    paths = {k: Path(v).expanduser() if (v := pick(k)) else None
             for k in ("root_cert", "client_cert", "client_key")}
    headers = []
    for i, item in enumerate(filter(str.strip, (pick("headers") or "").split(";")), 1):
        name, colon, value = item.partition(":")
        if not name.strip() or not value.strip():  # the message never shows a value: a secret
            shown = f"header {name.strip()!r} has no value" if colon and name.strip() else \
                f"entry {i} has no name before its ':'" if colon else f"entry {i} has no ':'"
            raise DeployError(f"headers must be 'name: value; ...', each with a value, but "
                              f"{shown}")
        headers.append((name.strip().lower(), value.strip()))
    try:
        return Security(tls=ssl or any(paths.values()), server_name=pick("server_name"),
                        headers=tuple(headers), **paths)
    except ServerError as exc:
        raise DeployError(exc.reason) from exc


def help_text() -> str:
    lines = [
        "Target URI: triton  or  triton:/HOST:PORT (the server's gRPC endpoint; "
        "triton:/http://HOST:PORT for HTTP).",
        "The server must run in explicit model control mode over a model repository that this",
        "machine can write (a local path). Config keys (-C key=value), with environment",
        "variables as fallback:",
    ]
    for key, text in HELP.items():
        names = [n for n in (ENV.get(key), NVIDIA_ENV.get(key)) if n]
        env = f" [{', then '.join(names)}]" if names else ""
        lines.append(f"  {key}{env}: {text}")
    lines.append("The deployment name is the Triton model name. See docs/deploy.md.")
    return "\n".join(lines)
