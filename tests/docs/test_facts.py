"""Facts the pages state, held against the code that makes them true (as the reference's drift
tests do for the spec and the CLI): change one side and the other must follow."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.docs.pages import DOCS, REPO

CONFIRMATION = (DOCS / "confirmation.md").read_text(encoding="utf-8")


def _yaml_block(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8").split("```yaml\n", 1)[1].split("```", 1)[0]


# -- the confirmation's paired design -------------------------------------------------------
def test_the_paired_design_as_the_code_runs_it() -> None:
    from tracker.confirm import paired
    from tracker.verdict import record, stopping

    stated = {
        f"loaded again every {paired.RELOAD_PAIRS} pairs": True,
        f"holds about {paired.BLOCK_REQUESTS} requests": True,
        f"at least {paired.MIN_WINDOW_MS} ms": True,
        f"run together for {paired.WARM_S:g} s": True,
        f"at most `{record.PAIRS_PER_ROUND} x confirm.rounds`": True,
        f"before {stopping.PAIRED_MIN} pairs": True,
        f"up to {stopping.FLOOR_S:g} s of measuring": True,
        "`confirm.min_rounds` counts pairs": True,
        "`confirm.top_k` applies to rounds only": True,
    }
    flat = " ".join(CONFIRMATION.split())
    assert [s for s in stated if s not in flat] == []


def test_a_paired_stop_counts_pairs() -> None:
    """The samples print what the code prints: a paired confirmation stops "after N pairs"."""
    from tracker.verdict import stopping

    record = {"rounds": [{}] * 6, "design": "paired", "min_rounds": 3, "rounds_target": 6}
    keys, why = stopping.next_step(record, {"perf_throughput": "maximize"}, ["a", "b"], 0.0)
    assert (keys, why) == ([], "6 pairs done (the most asked for) without a decision")
    samples = re.findall(r"confirmation stopped: .*", CONFIRMATION)
    assert samples and all(s.endswith("pairs") for s in samples), samples
    pages = [p for p in DOCS.glob("*.md") if "side by side" in p.read_text(encoding="utf-8")]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"confirm pair .*\n(?:.*\n)*?.*decided \(\w+\) after \d+ rounds",
                             text), page.name


def test_the_reference_says_what_rounds_mean_when_paired() -> None:
    from tracker.cli.reference_spec import spec_tables
    from tracker.spec import StudySpec

    rows = {f"{path}.{row[0].strip('`')}": row[4] for path, rows in spec_tables(StudySpec)
            for row in rows}
    assert "3 x" in rows["confirm.rounds"] and "pairs" in rows["confirm.min_rounds"]
    assert "paired design confirms only the best" in rows["confirm.top_k"]
    cli = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert "3 pairs per round" in cli and "the paired design confirms the best" in cli


def test_every_see_in_the_spec_names_a_table() -> None:
    text = (DOCS / "spec.md").read_text(encoding="utf-8")
    tables = set(re.findall(r"^<!-- generated: spec (.+?) -->", text, flags=re.M))
    missing = sorted(set(re.findall(r"see `([^`]+)`", text)) - tables)
    assert missing == [], f"spec.md points at tables it does not have: {missing}"


# -- measuring several models ---------------------------------------------------------------
def test_count_windows_are_accepted_for_several_models() -> None:
    from tracker.measure.entry import EntryLoad, shared_windows
    from tracker.spec import LoadSection
    from tracker.triton.model_config import ModelConfig

    def entry(**load: object) -> EntryLoad:
        return EntryLoad(ModelConfig(name="m"), LoadSection(**load))

    windows = shared_windows({"a": entry(window_requests=50), "b": entry(window_requests=50)})
    assert windows.window_requests == 50
    from tracker.errors import MeasurementError
    with pytest.raises(MeasurementError, match="share their windows"):
        shared_windows({"a": entry(window_requests=50), "b": entry(window_requests=60)})
    pipelines = " ".join((DOCS / "pipelines.md").read_text(encoding="utf-8").split())
    assert "count windows are refused" not in pipelines
    assert "a count window (`window_requests`) lasts until every model completed" in pipelines


# -- deployment ----------------------------------------------------------------------------
def test_the_deploy_check_is_described_as_the_code_does_it() -> None:
    text = " ".join((DOCS / "deploy.md").read_text(encoding="utf-8").split())
    assert "not checked more deeply" not in text
    assert "answers the study's probes" in text
    assert "compared with the study's reference answers" in text
    assert "Any failure before the commit" in text and "a check that fails" in text


def test_promote_without_a_repository_names_its_own_flags(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tracker.cli import cli

    for name in ("TRACKER_TRITON_REPOSITORY", "TRITON_MODEL_REPO"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["promote", "--study", "s", "--storage",
                                      f"sqlite:///{tmp_path / 'o.db'}"])
    assert result.exit_code == 1
    assert "--repository PATH" in result.output and "--no-deploy" in result.output
    assert "-C repository" not in result.output and "Traceback" not in result.output
    message = result.output.strip().splitlines()[-1]
    assert message in (DOCS / "promote.md").read_text(encoding="utf-8"), message


# -- the first ten minutes ------------------------------------------------------------------
def test_the_own_model_spec_is_four_lines_and_checks(tmp_path: Path) -> None:
    """The tutorial's spec, as written, with a fixed-batch model: `tracker check` accepts it
    and its default space has no batching knob (the one a fixed-batch model refuses)."""
    from tracker.cli import cli

    block = _yaml_block("own-model.md")
    assert len(block.splitlines()) == 4
    folder = tmp_path / "my_model"
    folder.mkdir()
    subprocess.run([sys.executable, str(REPO / "projects/quickstart/make_model.py"),
                    str(folder / "model.onnx"), "--batch", "fixed"], check=True,
                   capture_output=True, timeout=120)
    (folder / "study.yaml").write_text(block, encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", str(folder / "study.yaml")])
    assert result.exit_code == 0, result.output
    space = result.output.split("search space", 1)[1].split("knobs the", 1)[0]
    assert "instance_group.count" in space and "max_batch_size" not in space
    assert "dynamic_batching" not in space and "constraints: none" in result.output


def test_the_platform_is_stated_where_the_wheel_is_declared() -> None:
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (triton,) = [d for d in deps if d.startswith("nvidia-pytriton")]
    assert "sys_platform == 'linux'" in triton and "platform_machine == 'x86_64'" in triton
    for page in (REPO / "README.md", DOCS / "install.md"):
        text = " ".join(page.read_text(encoding="utf-8").split())
        assert "Linux on x86_64" in text and "docker" in text.lower() and "remote" in text, page


def test_system_installs_are_announced_and_skippable(tmp_path: Path) -> None:
    """With TRACKER_SKIP_SYSTEM_DEPS=1 and the services missing, scripts/system-deps.sh says
    what it would install and installs nothing (no apt-get on its PATH either way)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ls", "id"):
        (bin_dir / tool).symlink_to(f"/bin/{tool}" if Path(f"/bin/{tool}").exists()
                                    else f"/usr/bin/{tool}")
    proc = subprocess.run(["/bin/bash", str(REPO / "scripts/system-deps.sh")],
                          env={"PATH": str(bin_dir), "TRACKER_SKIP_SYSTEM_DEPS": "1"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert "not installing" in proc.stderr and "docker.io" in proc.stderr
    assert "TRACKER_SKIP_SYSTEM_DEPS=1" in proc.stderr
    script = (REPO / "scripts/system-deps.sh").read_text(encoding="utf-8")
    assert script.index("installing the system packages") < script.index("apt-get update")
    assert "TRACKER_SKIP_SYSTEM_DEPS" in (DOCS / "install.md").read_text(encoding="utf-8")
