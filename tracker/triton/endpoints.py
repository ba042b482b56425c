"""Where a Triton server listens (gRPC, HTTP, metrics) and how its clients reach it (TLS,
headers): :class:`Endpoints`, also importable from :mod:`tracker.triton.client`."""

from __future__ import annotations

from dataclasses import dataclass, field

from tracker.errors import ServerError
from tracker.triton.tls import Security


@dataclass(frozen=True)
class Endpoints:
    """Where a server listens. ``http_port``/``metrics_port`` may be unknown (remote servers)."""

    host: str
    http_port: int | None
    grpc_port: int
    metrics_port: int | None
    http_host: str | None = None
    metrics_host: str | None = None
    http_scheme: str = "http"
    #: TLS and headers the server wants (a remote server's; tracker/triton/tls.py)
    security: Security = field(default_factory=Security)

    @property
    def grpc(self) -> str:
        """``host:port`` as tritonclient.grpc wants it."""
        return f"{self.host}:{self.grpc_port}"

    @property
    def http(self) -> str | None:
        """``http://host:port`` or None when the HTTP endpoint is unknown."""
        if self.http_port is None:
            return None
        return f"{self.http_scheme}://{self.http_host or self.host}:{self.http_port}"

    @property
    def metrics(self) -> str | None:
        """The Prometheus URL (``http://host:port/metrics``) or None when unknown."""
        if self.metrics_port is None:
            return None
        return f"http://{self.metrics_host or self.host}:{self.metrics_port}/metrics"

    @classmethod
    def from_urls(cls, grpc: str, http: str | None = None, metrics: str | None = None,
                  security: Security | None = None) -> Endpoints:
        """Endpoints of a server someone else runs: ``grpc`` is ``host:port``; ``http`` and
        ``metrics`` are ``[http://]host:port`` (a path on the metrics URL is ignored)."""
        host, grpc_port = _host_port(grpc, "url")
        http_host = http_port = scheme = None
        if http:
            scheme = "https" if http.startswith("https://") else "http"
            http_host, http_port = _host_port(http, "http_url")
        metrics_host = metrics_port = None
        if metrics:
            metrics_host, metrics_port = _host_port(metrics, "metrics_url")
        return cls(host, http_port, grpc_port, metrics_port, http_host=http_host,
                   metrics_host=metrics_host, http_scheme=scheme or "http",
                   security=security or Security())


def _host_port(url: str, what: str) -> tuple[str, int]:
    rest = url.split("://", 1)[-1].split("/", 1)[0]
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ServerError(f"server {what} must look like host:port, but got {url!r}")
    return host, int(port)
