"""Keep secrets out of what is logged or printed.

Storage and tracking URLs can carry a password (``postgresql://user:secret@db/optuna``), a
token as the whole user part (``https://TOKEN@host``), a token in the query string
(``https://host/?token=...``) or a signature (a signed S3, GCS or Azure URL). Headers sent to a
server (``server.headers``) carry credentials such as ``Authorization: Bearer ...``.
Everything this package writes to MLflow, to the terminal or into an artifact goes through
this module: :func:`redact_url` (one URL), :func:`redact_text` (free text that may contain
URLs, ``password=...`` pairs, ``Bearer ...`` credentials or ``-H name:value`` flags, e.g. an
error message), :func:`mask_headers` (a header mapping) and :func:`redact_values` (text
that may hold values known to be secret).

Header values: every value is masked except those of :data:`HARMLESS_HEADERS`, a few
content-negotiation headers whose values are never credentials; a header name always stays.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"

# query-string keys whose values are secrets (compared lower-case, with "-" read as "_"):
# passwords and tokens, and the signature, credential and session token of signed URLs
# (AWS SigV4 X-Amz-*, GCS V4 X-Goog-*, Azure SAS `sig`); expiry and scope parameters stay
_SECRET_KEYS = frozenset({
    "password", "passwd", "pwd", "pass", "secret", "token", "access_token", "api_key", "apikey",
    "key", "auth", "authorization", "sig", "signature", "client_secret", "sslpassword",
    "x_amz_signature", "x_amz_credential", "x_amz_security_token", "x_goog_signature",
    "x_goog_credential",
})

#: header names whose values are shown: they never carry a credential
HARMLESS_HEADERS = frozenset({"accept", "accept-encoding", "accept-language", "content-type",
                              "user-agent"})

#: URL schemes whose user part is a user name (kept); in any other URL a user part without a
#: password is a token (``https://TOKEN@host``) and is masked
_USER_NAME_SCHEMES = frozenset({"postgresql", "postgres", "mysql", "mariadb", "mssql",
                                "oracle", "cockroachdb", "sqlite"})

# scheme://[user[:password]@]host... inside free text
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")
# key=value pairs in free text (libpq DSN style: "host=db password=secret")
_TEXT_KEYS = ("client_secret", "access_token", "sslpassword", "password", "passwd", "api_key",
              "apikey", "secret", "token", "pwd")
_KV_IN_TEXT = re.compile(r"(?i)\b(" + "|".join(_TEXT_KEYS) + r")(\s*=\s*)([^\s&;,'\"]+)")
# an HTTP credential in free text: "Bearer <token>", "Basic <base64>" (a token: 8 characters
# or more, not only letters, so "the bearer of bad news" stays)
_AUTH_IN_TEXT = re.compile(r"(?i)\b(bearer|basic)(\s+)"
                           r"((?=[A-Za-z]*[0-9\-._~+/=])[A-Za-z0-9\-._~+/]{8,}=*)")
# a header flag in free text: "-H name:value" (perf_analyzer, curl)
_HEADER_FLAG_IN_TEXT = re.compile(r"((?<![\w-])-H\s*['\"]?|--header[=\s]['\"]?)"
                                  r"([A-Za-z0-9!#$%&*+.^_`|~-]+)(\s*:\s*)([^\s'\"]+)")


def _is_secret_key(key: str) -> bool:
    return key.lower().replace("-", "_") in _SECRET_KEYS


def _scheme_keeps_user(scheme: str) -> bool:
    """``postgresql+psycopg2`` is a postgresql URL: its user part is a user name."""
    return scheme.lower().split("+", 1)[0] in _USER_NAME_SCHEMES


def redact_url(url: str) -> str:
    """``url`` with its password, token and secret query values replaced by ``***``.

    The user name of a database URL, the host, port, path and other query values stay, so
    the result still says which database or server is meant. Strings that are not URLs come
    back unchanged.
    """
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return _KV_IN_TEXT.sub(lambda m: m.group(1) + m.group(2) + MASK, url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{hostport}"
        elif userinfo and not _scheme_keeps_user(parts.scheme):
            netloc = f"{MASK}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_is_secret_key(k) for k, _ in pairs):
            query = urlencode([(k, MASK if _is_secret_key(k) else v) for k, v in pairs],
                              safe="*")
    if netloc == parts.netloc and query == parts.query:
        return url  # nothing secret; urlunsplit would also turn "sqlite:////a" into "sqlite://a"
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _header_flag(match: re.Match[str]) -> str:
    name = match.group(2)
    value = match.group(4) if name.lower() in HARMLESS_HEADERS else MASK
    return match.group(1) + name + match.group(3) + value


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted, ``password=...``-style pairs, ``Bearer``/``Basic``
    credentials and ``-H name:value`` header values masked."""
    text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    text = _KV_IN_TEXT.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _AUTH_IN_TEXT.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    return _HEADER_FLAG_IN_TEXT.sub(_header_flag, text)


def mask_header(name: str, value: object) -> str:
    """The value of header ``name`` as it may be shown: ``***`` unless the header is harmless."""
    return str(value) if name.strip().lower() in HARMLESS_HEADERS else MASK


def mask_headers(headers: Mapping[str, object] | Iterable[tuple[str, object]]) -> dict[str, str]:
    """Header name -> the value as it may be shown (:func:`mask_header`); names kept."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return {str(name): mask_header(str(name), value) for name, value in pairs}


def secret_header_values(headers: Mapping[str, object] | Iterable[tuple[str, object]]
                         ) -> list[str]:
    """The values of ``headers`` that :func:`mask_headers` masks (the secrets to look for)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [str(v) for k, v in pairs if str(v) and mask_header(str(k), v) == MASK]


#: a known secret shorter than this is not searched for in free text (it would mask every
#: "1" of a file); where it stands as a value (a header's), it is masked all the same
MIN_SECRET_CHARS = 6


def redact_values(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each known secret (of at least
    :data:`MIN_SECRET_CHARS` characters, longest first) replaced by ``***``, then
    :func:`redact_text`."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len,
                         reverse=True):
        text = text.replace(secret, MASK)
    return redact_text(text)
