"""The reference parts of the docs, made from the code so that they cannot drift from it: the
study spec's fields (from its pydantic models), the command line's flags (from the click
commands), the metric catalog (:data:`tracker.metrics.CATALOG`) and Model Analyzer's options
(:data:`tracker.peers.ma_options.OPTIONS`).

Each is a markdown block between ``<!-- generated: KEY -->`` and ``<!-- end generated: KEY -->``
on its page; the prose around the blocks is written by hand. One command rewrites them all:

    python -m tracker.cli.reference            # rewrite the blocks (a new one goes at the end)
    python -m tracker.cli.reference --check    # exit 1, naming each block that differs

tests/project/test_reference.py runs the check.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from tracker.cli.reference_spec import spec_tables
from tracker.metrics import CATALOG, Metric

COMMAND = "python -m tracker.cli.reference"
ROOT = Path(__file__).resolve().parents[2]
SPEC_PAGE, CLI_PAGE = "docs/spec.md", "docs/cli.md"
MIGRATE_PAGE = "docs/migrate-model-analyzer.md"


@dataclass(frozen=True)
class Block:
    """One generated block: its page, its key, the heading it gets when it is new, its text."""

    page: str
    key: str
    heading: str
    text: str

    @property
    def start(self) -> str:
        return f"<!-- generated: {self.key} -->"

    @property
    def end(self) -> str:
        return f"<!-- end generated: {self.key} -->"


def cell(text: object) -> str:
    """One table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# -- the spec --------------------------------------------------------------------------------
def spec_blocks(root: type | None = None) -> list[Block]:
    """A table per model class of the spec (``root``: :class:`tracker.spec.StudySpec`)."""
    if root is None:
        from tracker.spec import StudySpec
        root = StudySpec
    return [Block(SPEC_PAGE, f"spec {path}", f"### `{path}`", table(
        ("field", "type", "default", "allowed values", "meaning"), rows))
        for path, rows in spec_tables(root)]


# -- the command line ------------------------------------------------------------------------
def _param_type(param: click.Parameter) -> tuple[str, str]:
    """(type, allowed values) of a click parameter."""
    kind = param.type
    if isinstance(param, click.Option) and param.is_flag:
        return "flag", ""
    if isinstance(kind, click.Choice):
        return "choice", ", ".join(f"`{c}`" for c in kind.choices if c)
    if isinstance(kind, click.IntRange):
        low = f">= {kind.min}" if kind.min is not None else ""
        high = f"<= {kind.max}" if kind.max is not None else ""
        return "integer", ", ".join(x for x in (low, high) if x)
    if isinstance(kind, click.Path):
        return "path", ""
    name = {"integer": "integer", "float": "number", "text": "text", "int": "integer",
            "boolean": "boolean"}.get(kind.name, kind.name)
    return name, ""


def _param_row(param: click.Parameter) -> tuple[str, str, str, str, str]:
    if isinstance(param, click.Argument):
        return (f"`{param.make_metavar(click.Context(click.Command('x')))}`", "argument",
                "required" if param.required else "optional", "", "")
    assert isinstance(param, click.Option)
    flags = ", ".join(f"`{f}`" for f in [*param.opts, *param.secondary_opts])
    kind, allowed = _param_type(param)
    default = param.default
    shown = (f"`{default}`" if isinstance(default, str | int | float | Path)
             and default not in ("", False) else "")
    return flags, kind, shown, allowed, param.help or ""


def _commands(group: click.Group, prefix: str = "tracker") -> list[tuple[str, click.Command]]:
    """Every command under ``group``, a sub-group's own commands after it."""
    out: list[tuple[str, click.Command]] = []
    for name in sorted(group.commands):
        command = group.commands[name]
        out.append((f"{prefix} {name}", command))
        if isinstance(command, click.Group):
            out += _commands(command, f"{prefix} {name}")
    return out


#: the peer whose command line a command without parameters of its own takes
_PEER = {"perf-analyzer": "Perf Analyzer", "model-analyzer": "Model Analyzer"}


def _peer(name: str) -> str:
    return next((peer for word, peer in _PEER.items() if word in name.split()), "its peer")


def cli_blocks(group: click.Group | None = None) -> list[Block]:
    """A block per command of ``group`` (default: ``tracker``) and one for the group's own
    options: usage, the command's first help line, and a table of its parameters."""
    if group is None:
        from tracker.cli import cli as group
    assert group is not None
    out: list[Block] = []
    for name, command in [("tracker", group), *_commands(group)]:
        ctx = click.Context(command, info_name=name)
        usage = " ".join([name, *command.collect_usage_pieces(ctx)])
        params = [p for p in command.params if p.name != "help"]
        text = "\n".join([f"    {usage}", "", cell(command.get_short_help_str(limit=300)), "",
                          table(("parameter", "type", "default", "allowed values", "meaning"),
                                (_param_row(p) for p in params)) if params else
                          f"It takes {_peer(name)}'s own flags: [Coming from Model "
                          "Analyzer](migrate-model-analyzer.md) lists each."])
        out.append(Block(CLI_PAGE, f"cli {name}", f"## `{name}`", text))
    return out


# -- the metric catalog ----------------------------------------------------------------------
def metric_blocks(catalog: Sequence[Metric] = CATALOG) -> list[Block]:
    """The catalog as one table: name, better, unit, where the value comes from, CSV column."""
    rows = [(f"`{m.name}`", m.better, m.unit or "(a ratio)",
             m.by or ("the load generator" if m.field else "a monitor" if m.unit
                      else "the others"),
             f"`{m.column}`" if m.column else "") for m in catalog]
    return [Block(SPEC_PAGE, "metrics", "### The metric catalog", table(
        ("metric", "better", "unit", "measured by", "perf_analyzer CSV column"), rows))]


def _ma_default(value: object) -> str:
    return "" if value in (None, {}, []) else f"`{value}`"


def peer_blocks() -> list[Block]:
    """Model Analyzer's profile options (tracker.peers.ma_options.OPTIONS) as one table:
    the option, its default, and what the tracker does with it; Perf Analyzer's flags
    (tracker.peers.pa_flags) as another."""
    from tracker.peers.ma_options import OPTIONS
    from tracker.peers.pa_flags import flag_rows

    rows = []
    for o in OPTIONS:
        forms = [f"`{o.key}`", *([f"`{o.flag}`"] if o.flag else []),
                 *([f"`-{o.short}`"] if o.short else [])]
        rows.append((" ".join(forms), _ma_default(o.default), o.meaning))
    return [Block(MIGRATE_PAGE, "model-analyzer options", "## Every option", table(
        ("option (YAML key, flag)", "Model Analyzer's default", "what the tracker does"),
        rows)),
            Block(MIGRATE_PAGE, "perf-analyzer flags", "## Every Perf Analyzer flag", table(
                ("flag", "what the tracker does"), flag_rows()))]


def all_blocks() -> list[Block]:
    return [*spec_blocks(), *cli_blocks(), *metric_blocks(), *peer_blocks()]


# -- pages -----------------------------------------------------------------------------------
def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def render(page: str, blocks: Sequence[Block]) -> str:
    """``page`` with each block's text between its markers; a block the page lacks is
    appended at the end under its heading."""
    for block in blocks:
        body = f"{block.start}\n{block.text}\n{block.end}"
        found = re.search(re.escape(block.start) + r".*?" + re.escape(block.end), page, re.S)
        if found is not None:
            page = page[:found.start()] + body + page[found.end():]
        else:
            page = page.rstrip("\n") + f"\n\n{block.heading}\n\n{body}\n"
    return page


def differences(page: str, blocks: Sequence[Block]) -> list[str]:
    """What differs between ``page`` and ``blocks``, one line per block, naming the rows the
    page lacks or has in excess (their first cell)."""
    out = []
    for block in blocks:
        found = re.search(re.escape(block.start) + r"\n(.*?)\n" + re.escape(block.end), page,
                          re.S)
        if found is None:
            out.append(f"`{block.key}`: no block on the page")
            continue
        if found.group(1) == block.text:
            continue
        want, have = _rows(block.text), _rows(found.group(1))
        lacks = [r.split(" | ")[0][2:] for r in want if r not in have]
        extra = [r.split(" | ")[0][2:] for r in have if r not in want]
        what = "; ".join(x for x in (
            "missing or changed: " + ", ".join(lacks) if lacks else "",
            "not in the code: " + ", ".join(extra) if extra else "") if x)
        out.append(f"`{block.key}`: {what or 'the text differs'}")
    return out


def by_page(blocks: Sequence[Block]) -> dict[str, list[Block]]:
    pages: dict[str, list[Block]] = {}
    for block in blocks:
        pages.setdefault(block.page, []).append(block)
    return pages


def check(root: Path = ROOT, blocks: Sequence[Block] | None = None) -> list[str]:
    """One line per generated block that differs from the code (empty: all agree)."""
    out: list[str] = []
    for page, some in by_page(all_blocks() if blocks is None else blocks).items():
        path = root / page
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        out.extend(f"{page}: {line}" for line in differences(text, some))
    return out


def write(root: Path = ROOT, blocks: Sequence[Block] | None = None) -> list[Path]:
    """Rewrite every page's generated blocks; the pages that changed."""
    changed = []
    for page, some in by_page(all_blocks() if blocks is None else blocks).items():
        path = root / page
        old = path.read_text(encoding="utf-8") if path.exists() else f"# {page}\n"
        new = render(old, some)
        if new != old:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--check"]:
        problems = check()
        for line in problems:
            print(line)
        if problems:
            print(f"the docs and the code disagree: run `{COMMAND}` to regenerate")
        return 1 if problems else 0
    if args:
        print(f"usage: {COMMAND} [--check]", file=sys.stderr)
        return 2
    for path in write():
        print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
