"""The help of the drop-ins: ``tracker perf-analyzer -h`` and ``tracker model-analyzer profile
--help`` print the peer's usage, every flag or option of it (in the order of its own docs),
each marked with what the tracker does with it and why.

The marks and reasons are not written here: Perf Analyzer's come from
:func:`tracker.peers.pa_flags.flag_rows`, Model Analyzer's from
:data:`tracker.peers.ma_options.OPTIONS` and ``model-analyzer report``'s from
:data:`tracker.peers.model_analyzer.REPORT_OPTIONS`, the same tables the docs are made from.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

from tracker.peers.ma_options import SPEC_FIELD, MaOption

#: the flags that print the help (Perf Analyzer's ``-?``, ``-h`` and ``--help``)
HELP_FLAGS = ("-?", "-h", "--help")

#: Perf Analyzer's flags in the sections and order of its docs/cli.md
PA_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("General Options", ("-?", "-h", "--help", "-m", "-x", "--service-kind",
                         "--bls-composing-models", "--model-signature-name", "-v")),
    ("Measurement Options", (
        "--measurement-mode", "-p", "--measurement-interval", "--measurement-request-count",
        "-s", "--stability-percentage", "--percentile", "--warmup-request-count",
        "--request-count", "-r", "--max-trials", "--concurrency-range",
        "--periodic-concurrency-range", "--request-period", "--request-parameter",
        "--request-rate-range", "--request-distribution", "-l", "--latency-threshold",
        "--binary-search", "--request-intervals", "--max-threads")),
    ("Sequence Model Options", ("--num-of-sequences", "--sequence-length",
                                "--sequence-length-variation", "--sequence-id-range",
                                "--serial-sequences")),
    ("Input Data Options", ("--input-data", "-b", "--shape", "--string-data",
                            "--string-length", "--shared-memory",
                            "--output-shared-memory-size", "--input-tensor-format",
                            "--output-tensor-format")),
    ("Request Options", ("-i", "-a", "--async", "--sync", "--streaming", "-H",
                         "--grpc-compression-algorithm")),
    ("Server Options", (
        "-u", "--ssl-grpc-use-ssl", "--ssl-grpc-root-certifications-file",
        "--ssl-grpc-private-key-file", "--ssl-grpc-certificate-chain-file",
        "--ssl-https-verify-peer", "--ssl-https-verify-host",
        "--ssl-https-ca-certificates-file", "--ssl-https-client-certificate-file",
        "--ssl-https-client-certificate-type", "--ssl-https-private-key-file",
        "--ssl-https-private-key-type", "--triton-server-directory", "--model-repository")),
    ("Prometheus Metrics Options", ("--collect-metrics", "--metrics-url",
                                    "--metrics-interval")),
    ("Report Options", ("-f", "--profile-export-file", "--verbose-csv")),
    ("Trace Options", ("--trace-level", "--trace-rate", "--trace-count", "--log-frequency")),
    ("Deprecated Options", ("--data-directory", "-c", "-d", "-t", "-z")),
)

_WIDTH, _COLUMN = 100, 34
_MARKS = ("honoured: done as {peer} does it", "translated: set as the study spec's field "
          "named", "accepted: taken, with no effect here", "default only: another value is "
          "refused", "refused: the command stops before it starts anything")


def wants_help(args: Sequence[str]) -> bool:
    """Whether a drop-in's arguments ask for its help (anywhere, as its peer reads them)."""
    return any(arg in HELP_FLAGS for arg in args)


def _row(forms: str, text: str) -> list[str]:
    """One flag: its forms, then the wrapped text in the second column."""
    indent = " " * _COLUMN
    head = f"  {forms}"
    if len(head) > _COLUMN - 2:
        return [head, *textwrap.wrap(text, _WIDTH, initial_indent=indent,
                                     subsequent_indent=indent)]
    return textwrap.wrap(text, _WIDTH, initial_indent=head.ljust(_COLUMN),
                         subsequent_indent=indent)


def _legend(peer: str, marks: Sequence[str]) -> list[str]:
    return ["Each is marked:", *(f"  {m.format(peer=peer)}" for m in _MARKS
                                 if m.split(":")[0] in marks)]


def _marked(mark: str, why: str) -> str:
    return f"{mark}: {why}" if why else mark


# ---- Perf Analyzer --------------------------------------------------------------------------

def pa_mark(meaning: str) -> tuple[str, str]:
    """(mark, why) of a Perf Analyzer flag from what the tracker does with it."""
    for mark in ("refused", "accepted"):
        if meaning.startswith(mark):
            return mark, meaning.removeprefix(mark).lstrip(": ")
    return ("translated" if SPEC_FIELD.search(meaning) else "honoured"), meaning


def _pa_meanings() -> dict[str, tuple[int, str]]:
    """flag -> (its row in flag_rows, what the tracker does), from the docs' table."""
    from tracker.peers.pa_flags import flag_rows

    return {flag: (i, meaning) for i, (forms, meaning) in enumerate(flag_rows())
            for flag in re.findall(r"`([^`]+)`", forms)}


def pa_usage() -> str:
    """``tracker perf-analyzer``'s help: Perf Analyzer's flags, each marked."""
    known = _pa_meanings()
    lines = ["Usage: tracker perf-analyzer [options]", "",
             *textwrap.wrap("Perf Analyzer's command line (its docs/cli.md), measured by the "
                            "tracker's load generator and logged as an MLflow run.", _WIDTH),
             "", *_legend("Perf Analyzer", ("honoured", "translated", "accepted", "refused"))]
    for title, flags in PA_SECTIONS:
        lines += ["", f"{title}:"]
        done: set[str] = set()
        for flag in flags:
            if flag in done:
                continue
            if flag in HELP_FLAGS:
                group, mark, why = [flag], "honoured", "prints this help"
            elif flag in known:
                row, meaning = known[flag]
                group = [f for f in flags if known.get(f, (-1, ""))[0] == row]
                mark, why = pa_mark(meaning)
            else:
                group, mark, why = [flag], "refused", "not read by the tracker"
            done.update(group)
            lines += _row(", ".join(group), _marked(mark, why))
    return "\n".join(lines) + "\n"


# ---- Model Analyzer -------------------------------------------------------------------------

#: the first option of each group of OPTIONS (ma_options.py), and the group's title
_MA_GROUPS = {"model_repository": "The models", "output_model_repository_path": "The outputs",
              "concurrency": "The load", "run_config_search_mode": "The search",
              "objectives": "The goal", "triton_launch_mode": "Triton",
              "perf_analyzer_path": "Perf Analyzer", "monitoring_interval": "The rest"}


def _default(option: MaOption) -> str:
    if option.kind == "flag" or option.default in (None, {}, []):
        return ""
    return f" (Model Analyzer's default: {option.default})"


def ma_usage(command: str) -> str:
    """``tracker model-analyzer profile|analyze --help``: every option of Model Analyzer's
    profile, grouped, each marked."""
    from tracker.peers.ma_options import OPTIONS

    lead = ("DEPRECATED in Model Analyzer: aliased to profile. " if command == "analyze"
            else "")
    lines = [f"Usage: tracker model-analyzer [-m online] {command} [-f CONFIG_FILE] "
             "[options]", "",
             *textwrap.wrap(f"{lead}Model Analyzer's profile, run as tracked studies (one per "
                            "model, in turn). Every option is a --flag on the command line and "
                            "its key in the -f YAML (the command line wins); YAML marks the "
                            "keys only the file takes. -m/--mode before the command: online "
                            "is honoured, offline refused.", _WIDTH),
             "", *_legend("Model Analyzer", ("honoured", "translated", "default only", "refused"))]
    for option in OPTIONS:
        if option.key in _MA_GROUPS:
            lines += ["", f"{_MA_GROUPS[option.key]}:"]
        forms = ", ".join([*([f"-{option.short}"] if option.short else []),
                           option.flag or f"{option.key} (YAML)"])
        why = option.meaning.partition(": ")[2] if option.why else option.here
        lines += _row(forms, _marked(option.mark, f"{why}{_default(option)}"))
    return "\n".join(lines) + "\n"


def report_usage() -> str:
    """``tracker model-analyzer report --help``: report's options, each marked."""
    from tracker.peers.model_analyzer import REPORT_OPTIONS

    lines = ["Usage: tracker model-analyzer report [-n CONFIGS] [-e EXPORT_PATH] "
             "[-s CHECKPOINT_DIRECTORY] [options]", "",
             *textwrap.wrap("Model Analyzer's report, from a finished `tracker model-analyzer "
                            "profile`: its summary, and the detailed report of each "
                            "configuration named.", _WIDTH),
             "", *_legend("Model Analyzer", ("honoured", "accepted", "refused")), "", "Options:"]
    for flags, _key, meaning in REPORT_OPTIONS:
        lines += _row(", ".join(flags), meaning)
    lines += _row("plots (YAML)", "refused: the reports' plots are the tracker's")
    return "\n".join(lines) + "\n"


__all__ = ["HELP_FLAGS", "PA_SECTIONS", "ma_usage", "pa_mark", "pa_usage", "report_usage",
           "wants_help"]
