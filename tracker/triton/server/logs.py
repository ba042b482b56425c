"""Reading a Triton server log: what went wrong, in Triton's own words.

Shared by the launchers (why a start failed, why a model load failed) and by deployment
(deploy/publish.py: Triton answers a config it refuses while polling the repository with
only "failed to poll from model repository"; the reason is in its log), and by the study
(:func:`log_errors`: the last error lines a failed measurement or output check ends with).
"""

from __future__ import annotations

import re
from pathlib import Path

#: a C++ abort in the server or a backend stub: READY will never come, fail now
FATAL = "terminate called after throwing"
#: error lines of GPU probes that fail harmlessly on a machine without a GPU
_NOISE = ("CudaDriverHelper", "DCGM")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): \S")
_RUNTIME_LINE = re.compile(r"\[E:onnxruntime:[^\]]*\]\s*(\S.*)$")
_CRASH_LINE = re.compile(rf"^(Signal \(\d+\) received\.|{FATAL} .+)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def error_messages(log: str, model: str | None = None) -> list[str]:
    """The Triton error lines (``E1129 ...] message``) of ``log``, about ``model`` when given,
    as messages without the log prefix, in order."""
    out = []
    for line in log.splitlines():
        if len(line) > 1 and line[0] == "E" and line[1:5].isdigit() and "] " in line:
            message = line.split("] ", 1)[1].strip()
            if any(noise in message for noise in _NOISE):
                continue
            if model is None or f"'{model}'" in message or f" {model}" in message:
                out.append(message)
    return out


def first_error(log: str, model: str | None = None) -> str:
    """The first of :func:`error_messages` ("" when there is none)."""
    found = error_messages(log, model)
    return found[0] if found else ""


def first_problem(log: str) -> str:
    """The first line of ``log`` that says what went wrong (a Triton error line or a
    command-line complaint), without the log prefix."""
    for line in log.splitlines():
        low = line.lower()
        if "unrecognized option" in low or low.startswith("error:") or "invalid argument" in low:
            return line.split("] ", 1)[-1].strip()
    return first_error(log)


def log_size(path: Path | None) -> int:
    """The size of a log file now (0 when there is none): an offset for :func:`log_since`."""
    try:
        return path.stat().st_size if path else 0
    except OSError:
        return 0


def log_since(path: Path | None, offset: int, limit: int = 1 << 20) -> str:
    """What a log file got after ``offset`` (at most ``limit`` bytes; "" when unreadable)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(limit).decode(errors="replace")
    except OSError:
        return ""


def port_taken(log: str) -> str:
    """Triton's complaint that a port is already in use ("" when there is none)."""
    for line in log.splitlines():
        if "already in use" in line and "] " in line:
            return line.split("] ", 1)[1].strip()
    return ""


def fatal_line(log: str) -> str:
    """The line of a C++ abort (``terminate called after throwing ...``), "" when none."""
    return next((line.strip() for line in log.splitlines() if FATAL in line), "")


def log_errors(log: str, limit: int = 3, *, died: bool = False) -> list[str]:
    """The last ``limit`` distinct error lines of a server log, oldest first, then the last
    ``limit`` lines of a crash: Triton's own (``E1201
    ...] message``, the harmless GPU-probe noise left out), the Python exceptions a backend
    stub printed (``RuntimeError: ...``), onnxruntime's errors (``[E:onnxruntime:...]
    message``: a model that fails its requests in the shim) and the server's own crash
    (``Signal (11) received.``, an uncaught C++ exception), with the line the model printed
    just before it, if any. ``died``: the server process is gone (a kill leaves no crash
    line), so the last line a model printed ends the list too."""
    errors: list[str] = []
    crash: list[str] = []  # the crash's own lines, kept apart so they never push out the cause
    printed: list[str] = []  # the line just read, when a model printed it (else none)
    for line in log.splitlines():
        text = _ANSI.sub("", line).strip()
        runtime = _RUNTIME_LINE.search(text)
        if _CRASH_LINE.match(text):
            crash.extend([*printed, text])
        elif _EXCEPTION_LINE.match(text):
            errors.append(text)
        elif runtime is not None:
            errors.append(f"onnxruntime: {runtime.group(1)}")
        else:
            errors.extend(error_messages(text))
        printed = [text] if _printed(text) else []
    if died:
        crash.extend(printed)
    kept_errors = list(dict.fromkeys(errors))[-limit:]
    kept_crash = [line for line in dict.fromkeys(crash) if line not in kept_errors][-limit:]
    return kept_errors + kept_crash


_TRITON_LINE = re.compile(r"^[IWEF]\d{4} ")
_BACKTRACE_LINE = re.compile(r"^\d+# ")


def _printed(text: str) -> bool:
    """Whether a log line is one a model or backend printed itself (its stdout or stderr):
    not Triton's own (``I1201 ...``), not a table row, a backtrace frame or GPU-probe noise.
    The one just before a crash is often the model's last word on why."""
    return bool(text) and not (_TRITON_LINE.match(text) or _BACKTRACE_LINE.match(text)
                               or text[0] in "+|" or _CRASH_LINE.match(text)
                               or any(noise in text for noise in (*_NOISE, "NVML")))
