"""No word about how the project was made, in what users read (README.md, CHANGELOG.md,
docs/) and in the code's comments and docstrings: no issue numbers, no developers, no
sessions, no "done-when" figures, no phrases about the machine the project was built on."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from tests.docs.pages import REPO, prose, user_pages

#: what users must not read, each with why
WORDS = {
    r"(?<![\w&/])#\d+\b": "an issue number",
    r"\b[Ii]ssues? \d+\b": "an issue number",
    r"\b[Dd]evelopers?\b": "how the project was made",
    r"\b[Ss]essions?\b": "how the project was made",
    r"\b[Dd]one[- ]when\b": "how the project was made",
    r"this project's (?:2-core|CI|machine)|where this project was built|no cluster was "
    r"available|users asked for|development machine|\bmy own\b": "the machine of the build",
}
#: what the code's comments and docstrings must not say
CODE_WORDS = {k: v for k, v in WORDS.items() if v == "an issue number" or "evelopers" in k}


def found(text: str, words: dict[str, str] = WORDS) -> list[str]:
    """``line N: 'match' (why)`` for each forbidden word of ``text``."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, why in words.items():
            out += [f"line {number}: {m.group(0)!r} ({why})" for m in re.finditer(pattern, line)]
    return out


def page_problems(page: Path) -> list[str]:
    text = prose(page.read_text(encoding="utf-8"))
    name = page.relative_to(REPO) if page.is_relative_to(REPO) else page.name
    return [f"{name} {p}" for p in found(text)]


def comments_and_docstrings(source: str) -> str:
    """The comments and docstrings of a Python module, each on the line it starts on."""
    lines = [""] * (source.count("\n") + 2)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            lines[tok.start[0]] += tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                for i, text in enumerate(body[0].value.value.splitlines()):
                    lines[body[0].lineno + i] += " " + text
    return "\n".join(lines[1:])


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_word_about_how_it_was_made(page: Path) -> None:
    problems = page_problems(page)
    assert not problems, "reword these for users:\n" + "\n".join(problems)


def test_code_comments_name_no_issue() -> None:
    problems = []
    for path in sorted((REPO / "tracker").rglob("*.py")):
        text = comments_and_docstrings(path.read_text(encoding="utf-8"))
        problems += [f"{path.relative_to(REPO)} {p}" for p in found(text, CODE_WORDS)]
    assert not problems, "say what the code does, not which issue asked for it:\n" + \
        "\n".join(problems)


# -- self-tests: the check sees what it must ------------------------------------------------
def test_a_planted_issue_number_is_caught(tmp_path: Path) -> None:
    """A real page passes; the same page with "#35" planted in it fails, naming the line."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text(readme, encoding="utf-8")
    assert page_problems(page) == []
    page.write_text(readme + "\nThe paired design (#35) decides.\n", encoding="utf-8")
    line = len(readme.splitlines()) + 2
    assert page_problems(page) == [f"README.md line {line}: '#35' (an issue number)"]


def test_each_word_is_caught_and_code_is_not() -> None:
    text = ("see issue 30\nwhile eight developers ran tests\nthis session's venv\n"
            "the done-when figures\non this project's 2-core CI machine\n")
    assert [p.split(": ", 1)[0] for p in found(text)] == [
        "line 1", "line 2", "line 3", "line 4", "line 5"]
    assert found(prose("the module `tracker/invocation/session.py`\n```\nsession\n```\n")) == []
    assert found("an anchor [x](page.md#the-verdict), a colour &#35; and C# 12") == []


def test_code_comments_are_scanned(tmp_path: Path) -> None:
    source = ('"""Module (issue 30)."""\nX = "#35"  # see #35\n\n'
              'def f() -> None:\n    """Fixes #12."""\n')
    text = comments_and_docstrings(source)
    assert [p.split(": ", 1)[1] for p in found(text, CODE_WORDS)] == [
        "'issue 30' (an issue number)", "'#35' (an issue number)", "'#12' (an issue number)"]
