"""The generated reference (docs/spec.md's field tables, docs/cli.md, the metric catalog) agrees
with the code, and the check notices a field, a flag or a metric added without its line."""

from __future__ import annotations

import copy
from pathlib import Path

import click
from pydantic import Field

from tracker.cli import cli
from tracker.cli import reference as ref
from tracker.cli.reference_spec import spec_tables, undocumented
from tracker.metrics import CATALOG, Metric
from tracker.spec import ConfirmSection, StudySpec

FIX = f"regenerate them with `{ref.COMMAND}`"


def test_the_docs_agree_with_the_code() -> None:
    problems = ref.check()
    assert not problems, "the docs and the code disagree; " + FIX + ":\n" + "\n".join(problems)


def test_every_spec_field_has_a_description() -> None:
    missing = undocumented(StudySpec)
    assert not missing, ("spec fields without a description: write a docstring under each "
                         f"field in its model, then {FIX}: {missing}")


def test_every_flag_has_help() -> None:
    bare = [f"tracker {name} {p.opts[0]}" for name, command in cli.commands.items()
            for p in command.params if isinstance(p, click.Option) and not p.help]
    assert not bare, f"flags without help text: {bare}"


def test_the_spec_tables_say_types_defaults_and_bounds() -> None:
    rows = {f"{path}.{row[0].strip('`')}": row for path, rows in
            spec_tables(StudySpec)
            for row in rows}
    assert rows["server.startup_timeout_s"][1:4] == ("number", "`120`", "> 0")
    assert rows["load.stability_pct"][3] == "> 0; <= 100"
    assert rows["search.study_name"][1:4] == ("string", "none", "not empty")
    assert rows["server.mode"][3] == "`local`, `docker`, `remote`"
    assert rows["confirm.rounds"][1:4] == ("integer", "`10`", ">= 1")


# -- self-tests: each kind of addition without its line is caught ---------------------------
class _Confirm(ConfirmSection):
    new_knob: int = 0
    """A field added to a section."""


class _Spec(StudySpec):
    confirm: _Confirm = Field(default_factory=_Confirm)
    extra: bool = False
    """A section added at the top level."""


def test_a_spec_field_without_its_line_is_caught() -> None:
    problems = ref.check(blocks=ref.spec_blocks(_Spec))
    assert any("`spec confirm`" in p and "`new_knob`" in p for p in problems), problems
    assert any("`spec (top level)`" in p and "`extra`" in p for p in problems), problems


def test_a_field_without_a_description_is_caught() -> None:
    class Bare(StudySpec):
        undocumented_field: int = 0

    assert undocumented(Bare) == ["undocumented_field"]


def test_a_flag_without_its_line_is_caught() -> None:
    tune = copy.copy(cli.commands["tune"])
    tune.params = [*tune.params, click.Option(["--new-flag"], help="A flag added.")]
    group = copy.copy(cli)
    group.commands = {**cli.commands, "tune": tune}
    problems = ref.check(blocks=ref.cli_blocks(group))
    assert problems == ["docs/cli.md: `cli tracker tune`: missing or changed: `--new-flag`"]


def test_a_command_without_its_block_is_caught() -> None:
    group = copy.copy(cli)
    group.commands = {**cli.commands, "new": click.Command("new")}
    assert ref.check(blocks=ref.cli_blocks(group)) == [
        "docs/cli.md: `cli tracker new`: no block on the page"]


def test_a_metric_without_its_line_is_caught() -> None:
    blocks = ref.metric_blocks([*CATALOG, Metric("perf_new_figure", "maximize", "x/s")])
    assert ref.check(blocks=blocks) == [
        "docs/spec.md: `metrics`: missing or changed: `perf_new_figure`"]


def test_regenerating_fixes_what_the_check_finds(tmp_path: Path) -> None:
    """One command rewrites the blocks in place and appends a new one under its heading."""
    page = tmp_path / "docs" / "spec.md"
    page.parent.mkdir()
    page.write_text((ref.ROOT / "docs" / "spec.md").read_text(encoding="utf-8"))
    blocks = [*ref.spec_blocks(_Spec), *ref.metric_blocks(
        [*CATALOG, Metric("perf_new_figure", "maximize", "x/s")])]
    assert ref.check(tmp_path, blocks)
    assert ref.write(tmp_path, blocks) == [page]
    assert ref.check(tmp_path, blocks) == []
    text = page.read_text(encoding="utf-8")
    assert "### `confirm.new_knob`" not in text and "`perf_new_figure`" in text
    assert ref.write(tmp_path, blocks) == []  # nothing left to change
    new = ref.Block("docs/spec.md", "spec brand.new", "### `brand.new`", "| a |\n| --- |")
    ref.write(tmp_path, [new])
    assert page.read_text(encoding="utf-8").endswith(
        "### `brand.new`\n\n<!-- generated: spec brand.new -->\n| a |\n| --- |\n"
        "<!-- end generated: spec brand.new -->\n")


def test_the_command_checks() -> None:
    assert ref.main(["--check"]) == 0
    assert ref.main(["--bogus"]) == 2
