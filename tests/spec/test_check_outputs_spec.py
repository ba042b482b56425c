"""``check.outputs`` in the spec and the bad input ``tracker check`` refuses before a study
starts (docs/output-check.md): a negative
tolerance, an ``ignore`` naming no output, ``load.input_data`` rows that make no probe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.support.models import dynamic_batch
from tracker.cli import cli
from tracker.spec import load_spec


def _spec(folder: Path, **extra: object) -> Path:
    model = dynamic_batch(folder / "model.onnx")  # INPUT0 [batch, 8] -> OUTPUT0 [batch, 4]
    doc: dict[str, object] = {"model": {"name": "m", "path": str(model)}, **extra}
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _check(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def test_defaults_and_false(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path))
    assert spec.check.outputs.enabled and spec.check.outputs.rtol > 0
    off = load_spec(_spec(tmp_path, check={"outputs": False}))
    assert not off.check.outputs.enabled
    code, out = _check(_spec(tmp_path))
    assert code == 0 and "output check: 4 probes (inputs drawn from seed 0)" in out
    assert "['OUTPUT0']" in out


@pytest.mark.parametrize("key", ["rtol", "atol"])
def test_a_negative_tolerance_is_refused(tmp_path: Path, key: str) -> None:
    code, out = _check(_spec(tmp_path, check={"outputs": {key: -0.1}}))
    assert code == 1 and f"check.outputs.{key}: must be >= 0" in out and "-0.1" in out
    assert "Traceback" not in out


def test_ignore_must_name_an_output(tmp_path: Path) -> None:
    code, out = _check(_spec(tmp_path, check={"outputs": {"ignore": ["OUTPUT9"]}}))
    assert code == 1 and "check.outputs.ignore: 'OUTPUT9' is no output of model" in out
    assert "OUTPUT0" in out and "Traceback" not in out
    code, out = _check(_spec(tmp_path, check={"outputs": {"ignore": ["OUTPUT0"]}}))
    assert code == 0 and "ignored outputs: OUTPUT0" in out


def test_input_rows_the_model_rejects_as_probes(tmp_path: Path) -> None:
    data = tmp_path / "rows.json"
    data.write_text(json.dumps({"data": [{"INPUT0": [1.0] * 8}, {"INPUT0": [1.0] * 5}]}))
    code, out = _check(_spec(tmp_path, load={"input_data": str(data)}))
    assert code == 1 and "load.input_data: " in out and "data[1]" in out
    assert "must have shape [8]" in out and "Traceback" not in out
    data.write_text(json.dumps({"data": [{"INPUT0": [1.0] * 8}, {"INPUT0": [2.0] * 8}]}))
    code, out = _check(_spec(tmp_path, load={"input_data": str(data)}))
    assert code == 0 and "output check: 2 probes (rows of load.input_data)" in out
