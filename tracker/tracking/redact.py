"""Keep secrets out of what is logged or printed.

Storage and tracking URLs can carry a password (``postgresql://user:secret@db/optuna``) or a
token in the query string (``https://host/?token=...``). Everything this package writes to
MLflow, to the terminal or into an artifact goes through :func:`redact_url` (one URL) or
:func:`redact_text` (free text that may contain URLs, e.g. an error message).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"

# query-string keys whose values are secrets (compared lower-case, with "-" read as "_")
_SECRET_KEYS = frozenset({
    "password", "passwd", "pwd", "pass", "secret", "token", "access_token", "api_key", "apikey",
    "key", "auth", "authorization", "sig", "signature", "client_secret", "sslpassword",
})

# scheme://[user[:password]@]host... inside free text
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")
# key=value pairs in free text (libpq DSN style: "host=db password=secret")
_TEXT_KEYS = ("client_secret", "access_token", "sslpassword", "password", "passwd", "api_key",
              "apikey", "secret", "token", "pwd")
_KV_IN_TEXT = re.compile(r"(?i)\b(" + "|".join(_TEXT_KEYS) + r")(\s*=\s*)([^\s&;,'\"]+)")


def _is_secret_key(key: str) -> bool:
    return key.lower().replace("-", "_") in _SECRET_KEYS


def redact_url(url: str) -> str:
    """``url`` with its password and secret query values replaced by ``***``.

    The user name, host, port, path and other query values stay, so the result still says
    which database or server is meant. Strings that are not URLs come back unchanged.
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
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{MASK}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_is_secret_key(k) for k, _ in pairs):
            query = urlencode([(k, MASK if _is_secret_key(k) else v) for k, v in pairs],
                              safe="*")
    if netloc == parts.netloc and query == parts.query:
        return url  # nothing secret; urlunsplit would also turn "sqlite:////a" into "sqlite://a"
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted and ``password=...``-style pairs masked."""
    text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    return _KV_IN_TEXT.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
