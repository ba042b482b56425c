"""How a client reaches a server that wants TLS or extra headers: one :class:`Security` for
the load, the control client, perf_analyzer and the deployment target alike.

Triton terminates TLS on its gRPC endpoint itself (``--grpc-use-ssl``, ``--grpc-use-ssl-mutual``,
``--grpc-server-cert``/``--grpc-server-key``/``--grpc-root-cert``); its HTTP endpoint has no TLS
option (Triton's docs point to a reverse proxy in front of it), so an ``https://`` URL reaches a
proxy. Headers go with every request: gRPC metadata, or HTTP headers (an auth token a gateway
checks, for instance).

A wrong certificate shows only when a connection is tried: gRPC's channel would keep retrying
it until a deadline. :func:`probe` tries one TLS handshake (and, for gRPC, reads the server's
first frame, where a refused client certificate shows) and raises at once with the reason and
the URL.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracker.errors import ServerError


@dataclass(frozen=True)
class Security:
    """TLS and headers for one server. ``tls`` False: a plain connection (``headers`` still
    sent). ``root_cert``: PEM file of the CA that signed the server's certificate (None: the
    system's CAs); ``client_cert``/``client_key``: the client's PEM pair for mutual TLS;
    ``server_name``: the name to check the server's certificate against, when it differs from
    the host in the URL."""

    tls: bool = False
    root_cert: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    server_name: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, tls: object | None, headers: Mapping[str, str] | None = None) -> Security:
        """From a spec's ``tls`` section (an object with the four fields, or None)."""
        pairs = tuple((str(k).lower(), str(v)) for k, v in (headers or {}).items())
        if tls is None:
            return cls(headers=pairs)
        return cls(tls=True, root_cert=getattr(tls, "root_cert", None),
                   client_cert=getattr(tls, "client_cert", None),
                   client_key=getattr(tls, "client_key", None),
                   server_name=getattr(tls, "server_name", None), headers=pairs)

    def __post_init__(self) -> None:
        if (self.client_cert is None) != (self.client_key is None):
            raise ServerError("a client certificate needs its key and a key its certificate "
                              f"(got client_cert={self.client_cert}, "
                              f"client_key={self.client_key})")
        for what, path in (("root_cert", self.root_cert), ("client_cert", self.client_cert),
                           ("client_key", self.client_key)):
            if path is not None and not Path(path).is_file():
                raise ServerError(f"tls.{what} must be a readable PEM file, but {str(path)!r} "
                                  "does not exist")
        for name, value in self.headers:
            if not name or not value:
                raise ServerError(f"a header needs a name and a value, but got name {name!r} "
                                  f"with {'a' if value else 'no'} value")  # a value: a secret

    # -- gRPC ------------------------------------------------------------------------------
    def grpc_credentials(self) -> object:
        """``grpc.ssl_channel_credentials`` from the PEM files (call only when ``tls``)."""
        import grpc

        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.root_cert), private_key=_read(self.client_key),
            certificate_chain=_read(self.client_cert))

    def grpc_options(self) -> list[tuple[str, str]]:
        """Channel options: the name the server's certificate must carry, when set."""
        if self.tls and self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []

    def grpc_metadata(self) -> tuple[tuple[str, str], ...] | None:
        return self.headers or None

    def grpc_client_kwargs(self) -> dict[str, object]:
        """Keyword arguments for ``tritonclient.grpc.InferenceServerClient``."""
        if not self.tls:
            return {}
        return {"ssl": True, "root_certificates": _path(self.root_cert),
                "private_key": _path(self.client_key),
                "certificate_chain": _path(self.client_cert),
                "channel_args": self.grpc_options() or None}

    # -- HTTP ------------------------------------------------------------------------------
    def ssl_context(self, alpn: str | None = None) -> ssl.SSLContext:
        """A client context that trusts ``root_cert`` and presents the client pair."""
        ctx = ssl.create_default_context(cafile=_path(self.root_cert))
        if self.client_cert is not None and self.client_key is not None:
            ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        if alpn:
            ctx.set_alpn_protocols([alpn])
        return ctx

    def http_headers(self) -> dict[str, str]:
        return dict(self.headers)

    def urlopen(self, url: str, timeout_s: float) -> Any:
        """GET ``url`` with the headers (and the TLS context for ``https://``)."""
        import urllib.request

        request = urllib.request.Request(url, headers=self.http_headers())
        ctx = self.ssl_context() if url.startswith("https://") else None
        return urllib.request.urlopen(request, timeout=timeout_s, context=ctx)


def _read(path: Path | None) -> bytes | None:
    return Path(path).read_bytes() if path is not None else None


def _path(path: Path | None) -> str | None:
    return str(path) if path is not None else None


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _answers_h2(tls: ssl.SSLSocket, timeout_s: float) -> bool:
    """Whether a gRPC server talks after the handshake (HTTP/2 preface and empty SETTINGS
    sent): a server that refuses the client's certificate closes the connection instead."""
    tls.settimeout(timeout_s)
    try:
        tls.sendall(H2_PREFACE)
        return bool(tls.recv(1))
    except TimeoutError:
        return True  # slow, not refused: the readiness wait decides
    except (ConnectionError, ssl.SSLError):
        return False


def probe(host: str, port: int, security: Security, *, protocol: str = "grpc",
          timeout_s: float = 5.0) -> None:
    """One TLS connection to ``host:port`` as ``security`` says; ServerError naming the URL
    and the reason when the port does not answer or the handshake (or, over gRPC, the
    server's check of the client certificate) fails. Nothing to do without TLS."""
    if not security.tls:
        return
    url = f"{'grpcs' if protocol == 'grpc' else 'https'}://{host}:{port}"
    ctx = security.ssl_context(alpn="h2" if protocol == "grpc" else None)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, \
                ctx.wrap_socket(raw, server_hostname=security.server_name or host) as tls:
            if protocol == "grpc" and not _answers_h2(tls, min(timeout_s, 2.0)):
                raise ServerError(f"TLS to {url} failed: the server closed the connection "
                                  "after the handshake: it did not accept the client "
                                  "certificate (tls.client_cert/client_key)")
    except ssl.SSLError as exc:
        raise ServerError(f"TLS to {url} failed: {exc.reason or exc} (check tls.root_cert, "
                          "tls.client_cert/client_key and tls.server_name)") from exc
    except OSError as exc:
        raise ServerError(f"cannot reach {url}: {exc.strerror or exc}") from exc
