"""``load.trace`` (tracker/spec/trace.py): both formats read, and a bad trace refused by the
spec with the file and the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker.errors import SpecError
from tracker.spec import parse_spec
from tracker.spec.trace import read_trace


def _spec(tmp_path: Path, name: str, text: str) -> object:
    (tmp_path / name).write_text(text)
    return parse_spec({"model": {"name": "m", "path": "m.onnx"},
                       "load": {"trace": name}}, base_dir=tmp_path)


def test_request_intervals_and_jsonl_timestamps(tmp_path: Path) -> None:
    gaps = tmp_path / "gaps.txt"
    gaps.write_text("1000\n1000\n0\n2000\n")
    trace = read_trace(gaps)
    assert trace.gaps_ns == (1_000_000, 1_000_000, 0, 2_000_000)
    assert trace.rate == pytest.approx(4 / 0.004)
    rows = tmp_path / "t.jsonl"
    rows.write_text('{"timestamp": 0}\n{"timestamp": 2.5, "input_index": 3}\n\n'
                    '{"timestamp": 10, "batch_size": 1}\n')
    trace = read_trace(rows)
    assert trace.gaps_ns == (0, 2_500_000, 7_500_000)
    assert trace.indices == (-1, 3, -1) and trace.batch_sizes == (0, 0, 1)
    spec = _spec(tmp_path, "ok.txt", "500\n")
    assert spec.load.trace == tmp_path / "ok.txt"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("name", "text", "said"), [
    ("empty.txt", "", "line 1: has no request"),
    ("neg.txt", "100\n-5\n", "line 2: a gap must be >= 0 microseconds, but got -5"),
    ("word.txt", "100\n100\nfast\n", "line 3: a gap (microseconds) must be a number"),
    ("blank.txt", "100\n\n100\n", "line 2: is empty"),
    ("zero.txt", "0\n0\n", "every gap is 0"),
    ("back.jsonl", '{"timestamp": 5}\n{"timestamp": 4}\n', "line 2: timestamps must not go back"),
    ("json.jsonl", '{"timestamp": 5}\n{oops\n', "line 2: is not JSON"),
    ("idx.jsonl", '{"timestamp": 5, "input_index": -1}\n', "line 1: 'input_index' must be"),
    ("none.jsonl", '[1, 2]\n', "line 1: must be an object with a 'timestamp'"),
])
def test_a_bad_trace_is_refused_with_its_line(tmp_path: Path, name: str, text: str,
                                              said: str) -> None:
    with pytest.raises(SpecError) as caught:
        _spec(tmp_path, name, text)
    assert said in str(caught.value) and "load.trace" in str(caught.value)


def test_an_unreadable_trace_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SpecError, match="cannot read"):
        read_trace(tmp_path / "bin.txt")
    parse_spec({"model": {"name": "m", "path": "m.onnx"}}, base_dir=tmp_path)
    with pytest.raises(SpecError, match=r"load.trace: cannot read .*missing.txt"):
        parse_spec({"model": {"name": "m", "path": "m.onnx"},
                    "load": {"trace": "missing.txt"}}, base_dir=tmp_path)
