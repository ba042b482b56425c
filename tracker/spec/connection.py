"""How the tool connects to a server that wants TLS or headers: ``server.tls``
(:class:`TlsSection`) and the checks of ``server.headers`` (:func:`check_headers`);
tracker/triton/tls.py uses them."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator, model_validator

from tracker.spec.messages import problem, show
from tracker.spec.model_section import SpecModel, resolve_path

HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


class TlsSection(SpecModel):
    """TLS to the server (gRPC: Triton's ``--grpc-use-ssl``; HTTP: an ``https://`` proxy in
    front of Triton). Every file is PEM; ``server_name`` is the name the server's certificate
    must carry when it differs from the URL's host."""

    root_cert: Annotated[Path | None, Field(strict=False)] = None
    """PEM file of the CA that signed the server's certificate (default: the system's)."""
    client_cert: Annotated[Path | None, Field(strict=False)] = None
    """PEM file of the client's certificate, for mutual TLS (with client_key)."""
    client_key: Annotated[Path | None, Field(strict=False)] = None
    """PEM file of the client's private key, for mutual TLS (with client_cert)."""
    server_name: Annotated[str, Field(min_length=1)] | None = None
    """The name the server's certificate must carry, when it is not the URL's host."""

    @field_validator("root_cert", "client_cert", "client_key")
    @classmethod
    def _file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        value = resolve_path(value, info)
        if value is not None and not value.is_file():
            raise problem(f"must be an existing PEM file, but {str(value)!r} does not exist")
        return value

    @model_validator(mode="after")
    def _pair(self) -> TlsSection:
        if (self.client_cert is None) != (self.client_key is None):
            raise problem("client_cert and client_key go together (mutual TLS), but got "
                          f"client_cert={show(self.client_cert and str(self.client_cert))}, "
                          f"client_key={show(self.client_key and str(self.client_key))}")
        return self


def _kind(value: object) -> str:
    """What a header value is, without showing it (a value may be a credential)."""
    shown = show(value) if value is None or value == "" else None
    return shown or f"a value of type {type(value).__name__}"


#: ``${VAR}`` in a header value: replaced from the environment when the spec is read
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(name: object, text: str) -> str:
    """``text`` with each ``${VAR}`` replaced by the variable's value (a token kept out of
    the spec file); a variable that is not set is an error, not a header sent as written."""
    missing = sorted({m.group(1) for m in ENV_REF.finditer(text)} - set(os.environ))
    if missing:
        raise problem(f"header {name!r} names ${{{missing[0]}}}, which must be set in the "
                      "environment, but is not")
    expanded = ENV_REF.sub(lambda m: os.environ[m.group(1)], text)
    if not expanded.strip():
        raise problem(f"header {name!r} needs a value, but the variables it names are empty")
    return expanded


def check_headers(value: object) -> dict[str, str]:
    """Header name -> value, each a non-empty string (a header without a value is a mistake,
    not an empty header), ``${VAR}`` in a value taken from the environment. Messages name the
    header, never its value (a token)."""
    if not isinstance(value, dict):
        raise problem(f"must be a mapping of header name -> value, but got {_kind(value)}")
    for name, text in value.items():
        if not HEADER_NAME.fullmatch(str(name)):
            raise problem(f"header names are HTTP tokens (letters, digits, '-'), but got "
                          f"{show(name)}")
        if not isinstance(text, str) or not text:
            raise problem(f"header {name!r} needs a value (a non-empty string), but got "
                          f"{_kind(text)}")
    return {str(k): _expand(k, str(v)) for k, v in value.items()}

