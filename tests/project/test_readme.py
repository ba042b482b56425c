"""README.md stays short, links only what exists, and its runnable command blocks run.

A block is runnable when the line before its opening fence is ``<!-- runnable -->`` (the block
runs as written) or ``<!-- runnable: COMMAND -->`` (COMMAND runs instead: the same commands,
shortened where the block would take minutes). Each runs with bash in a copy of the repository
in a temporary folder, whose ``.venv`` is this interpreter's environment.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MARK = re.compile(r"^<!-- runnable(?::\s*(?P<short>.*?))?\s*-->$")


def runnable_blocks(text: str) -> list[tuple[str, str]]:
    """(the block as written, the command the test runs) for each block marked runnable."""
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        found = MARK.match(line.strip())
        if found is None:
            continue
        assert i + 1 < len(lines) and lines[i + 1].startswith("```"), (
            f"README.md line {i + 1}: a runnable mark must stand right before a ``` block")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        block = "\n".join(lines[i + 2:end])
        out.append((block, found.group("short") or block))
    return out


def test_runnable_marks_are_found() -> None:
    text = ("<!-- runnable -->\n```bash\necho a\n```\n\n"
            "<!-- runnable: echo b -->\n```\nsleep 600\n```\n")
    assert runnable_blocks(text) == [("echo a", "echo a"), ("sleep 600", "echo b")]
    with pytest.raises(AssertionError, match="right before"):
        runnable_blocks("<!-- runnable -->\ntext\n")


def test_the_readme_is_short_and_starts_with_the_tune_command() -> None:
    """The first block is the tune command alone; the test suite (which may install system
    packages) stands in its own section, "Develop"."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120
    first = text.split("```bash\n", 1)[1].split("```", 1)[0]
    assert first.startswith("bash scripts/tune.sh") and len(first.splitlines()) == 1
    develop = text.split("\n## Develop\n", 1)[1]
    assert "bash scripts/test.sh" in develop and "bash scripts/test.sh" not in \
        text.split("\n## Develop\n", 1)[0]


def test_the_readme_links_what_exists() -> None:
    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w/])((?:docs|projects|scripts|benchmarks)/[\w./-]*\w)", text))
    assert named and not [n for n in named if not (REPO / n).exists()]


def _copy(dest: Path) -> Path:
    """The repository's files (tracked, and new ones git does not ignore) under ``dest``, with
    a ``.venv`` that is this interpreter's environment, already installed for scripts/env.sh."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    venv, real = dest / ".venv", Path(sys.prefix)
    (venv / "bin").mkdir(parents=True)
    for entry in real.iterdir():  # pyvenv.cfg and lib/ make .venv/bin/python this venv's
        if entry.name not in ("bin", ".gitignore") and not entry.name.startswith(".installed"):
            (venv / entry.name).symlink_to(entry)
    for tool in (real / "bin").iterdir():
        (venv / "bin" / tool.name).symlink_to(tool)
    digest = hashlib.sha1(b"".join((dest / f).read_bytes() for f in
                                   ("pyproject.toml", "requirements.lock"))).hexdigest()[:12]
    (dest / ".venv" / f".installed-{digest}").touch()
    return dest


@pytest.mark.triton
@pytest.mark.slow
@pytest.mark.parametrize("block", [b for _, b in runnable_blocks(README.read_text("utf-8"))])
def test_a_runnable_readme_block_runs(block: str, tmp_path: Path) -> None:
    root = _copy(tmp_path / "triton-tracker")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TRACKER_"))}
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    tail = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, f"{block}\n--- output ---\n{tail}"
    assert not _left_behind(root)


def _left_behind(root: Path) -> list[int]:
    """Processes still running whose command line names a path under ``root``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(str(root) in part for part in proc.info["cmdline"] or ()):
            found.append(proc.pid)
    return found


def test_no_page_names_a_page_the_repository_lacks() -> None:
    """Every ``*.md`` a page names (README.md, docs/*.md) is in the repository."""
    pages = [README, *sorted((REPO / "docs").glob("*.md"))]
    missing = [f"{page.relative_to(REPO)}: {name}" for page in pages
               for name in sorted(set(re.findall(r"(?<![\w/.-])([\w/.-]+\.md)\b",
                                                 page.read_text(encoding="utf-8"))))
               if not any((base / name).exists() for base in (REPO, REPO / "docs"))]
    assert missing == []
