"""The ``tracker`` command group: reports every TrackerError, and every OSError (a read-only or
full disk, a missing file), as one line and exit status 1, and a command stopped by SIGINT or
SIGTERM as one line and 130 or 143; the commands register on it
(tracker/cli/study.py, tracker/cli/deploy.py). Each command runs with MLflow's HTTP retries
bounded (:func:`tracker.cli.params.mlflow_http_env`)."""

from __future__ import annotations

import errno
import re
import shutil
from typing import Any

import click

from tracker.cli.params import mlflow_http_env
from tracker.cli.params import print_version as _print_version
from tracker.errors import TrackerError
from tracker.lifecycle import Interrupted, interruptible

_READ_ONLY = {errno.EROFS: "make it writable or choose another path",
              errno.EACCES: "make it writable for this user or choose another path",
              errno.EPERM: "make it writable for this user or choose another path"}
_RESUME = "run the same command again: the study resumes"
_FULL = {errno.ENOSPC: f"free space on that disk and {_RESUME}",
         errno.EDQUOT: f"free space (or raise your quota) on that disk and {_RESUME}",
         errno.EFBIG: "the file is larger than the file system or this process's file size "
         f"limit (ulimit -f) allows: free space or raise the limit, and {_RESUME}"}
_ERRNO = re.compile(r"^\[Errno (\d+)\] ([^:]*)")


def os_error_line(exc: OSError) -> str:
    """One line for an OSError: the path (``filename``), what the system said, and the fix
    where there is one (read-only path, full disk)."""
    code, reason, path = exc.errno, exc.strerror, exc.filename
    failed = exc.args[0] if isinstance(exc, shutil.Error) and exc.args else None
    if isinstance(failed, list) and failed and len(failed[0]) == 3:  # shutil.copytree's list
        path, why = failed[0][1], str(failed[0][2])  # (source, destination, reason)
        found = _ERRNO.match(why)
        code, reason = (int(found[1]), found[2]) if found else (None, why)
    hint = _READ_ONLY.get(code or 0) or _FULL.get(code or 0)
    if path is None:
        text = str(reason or exc) if hint else str(exc) or type(exc).__name__
    elif exc.filename2 is not None and code in _FULL:  # a copy: the destination is full
        text = f"{exc.filename2}: {reason}"
    else:
        where = f"{path} -> {exc.filename2}" if exc.filename2 is not None else str(path)
        text = f"{where}: {reason or exc}"
    return " ".join((f"{text}; {hint}" if hint else text).split())


class _Group(click.Group):
    """A click group that reports TrackerError and OSError as one message (no traceback) and
    exits 1, a command stopped by SIGINT or SIGTERM as one line and 130 or 143
    (:mod:`tracker.lifecycle`), with MLflow's HTTP retries bounded while the command runs."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with mlflow_http_env(), interruptible():
                return super().invoke(ctx)
        except (TrackerError, OSError) as err:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            from tracker.tracking.runs import unreachable

            line = os_error_line(err) if isinstance(err, OSError) else unreachable(str(err))
            click.echo(f"error: {line}", err=True)
            ctx.exit(1)
        except Interrupted as stop:  # SIGINT or SIGTERM, after the command cleaned up
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(str(stop), err=True)
            ctx.exit(stop.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version (and the packages that decide "
              "how Triton is run and measured) and exit.")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of short error messages.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Tune Triton Inference Server model configurations, tracked in MLflow."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
