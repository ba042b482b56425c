"""What ``tracker check`` says of the steps after the search, for each kind of model: the
confirmation's design (paired, or rounds and why) and whether ``mlflow.pyfunc`` runs a
registered version in-process (refused, with the reason and what answers instead). The same
rules decide the confirmation's design and the registered version's flavors, so what check
says is what the study does. ``tracker check`` starts no server for these kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.deploy.test_deploy_kinds import (
    COUNTER,
    COUNTER_CONFIG,
    DCOUNTER,
    DCOUNTER_CONFIG,
    ECHO,
    ECHO_CONFIG,
    STREAMER,
    STREAMER_CONFIG,
)
from tests.support import models
from tests.support.formats import prompts_file, python_model, python_scale_model
from tests.support.pipeline import bls_repository, ensemble_repository
from tracker.cli import cli
from tracker.triton import model_config
from tracker.triton.formats.base import PYFUNC_INSTEAD, pyfunc_problem


def _check(tmp: Path, model: dict[str, Any], **extra: Any) -> str:
    spec = tmp / "study.yaml"
    spec.write_text(yaml.safe_dump({"model": model, **extra}, sort_keys=False))
    checked = CliRunner().invoke(cli, ["check", str(spec)])
    assert checked.exit_code == 0, checked.output
    lines = checked.output.splitlines()
    start = lines.index("after the search:")
    return "\n".join(lines[start:start + 3])


def test_check_says_what_the_confirmation_and_pyfunc_do_for_each_kind(tmp_path: Path) -> None:
    onnx = models.dynamic_batch(tmp_path / "onnx" / "model.onnx")
    onnx_model = {"name": "m", "path": str(onnx)}
    said = _check(tmp_path / "onnx", onnx_model)
    assert "confirmation: paired: the best and the default side by side" in said
    assert "mlflow.pyfunc: the registered version's ONNX file runs in-process" in said
    rounds = _check(tmp_path / "onnx", onnx_model, confirm={"design": "rounds"})
    assert "confirmation: in rounds (confirm.design: rounds)" in rounds
    off = _check(tmp_path / "onnx", onnx_model, confirm={"enabled": False})
    assert "confirmation: off (confirm.enabled: false)" in off

    python = python_scale_model(tmp_path / "py")
    said = _check(tmp_path / "py", {"name": "pyscale", "path": str(python)})
    assert "mlflow.pyfunc: refused: model 'pyscale' runs on Triton's python backend" in said
    assert PYFUNC_INSTEAD in said and "confirmation: paired" in said

    stream = python_model(tmp_path / "s", "streamer", STREAMER.replace("@SHIFT@", ""),
                          STREAMER_CONFIG)
    said = _check(tmp_path / "s", {"name": "streamer", "path": str(stream)},
                  load={"input_data": str(prompts_file(tmp_path / "s"))})
    assert "mlflow.pyfunc: refused: model 'streamer' runs on Triton's python backend" in said

    counter = python_model(tmp_path / "c", "counter", COUNTER, COUNTER_CONFIG)
    said = _check(tmp_path / "c", {"name": "counter", "path": str(counter)})
    assert "mlflow.pyfunc: refused: model 'counter' runs on Triton's python backend" in said
    dcounter = python_model(tmp_path / "d", "dcounter", DCOUNTER, DCOUNTER_CONFIG)
    said = _check(tmp_path / "d", {"name": "dcounter", "path": str(dcounter)})
    assert "mlflow.pyfunc: refused: model 'dcounter' runs on Triton's python backend" in said

    repo = ensemble_repository(tmp_path / "e")
    said = _check(tmp_path / "e", {"name": "pipe", "path": str(repo)})
    assert "confirmation: paired" in said
    assert "mlflow.pyfunc: refused: a version of this study is a Triton repository of 4 " \
           "models" in said

    bls = bls_repository(tmp_path / "b")
    said = _check(tmp_path / "b", {"name": "bls", "path": str(bls), "composing": ["net"]})
    assert "confirmation: in rounds, not paired: BLS model 'bls' names the models it calls" \
        in said
    assert "mlflow.pyfunc: refused: a version of this study is a Triton repository of 2 " \
           "models" in said

    said = _check(tmp_path / "e", {"name": ["pipe", "other"], "path": str(repo)})
    assert "confirmation: paired" in said
    assert "mlflow.pyfunc: refused: a version of this study is a Triton repository of 5 " \
           "models" in said

    both = tmp_path / "j"
    python_model(both, "jstreamer", STREAMER.replace("@SHIFT@", ""), STREAMER_CONFIG)
    python_model(both, "jecho", ECHO, ECHO_CONFIG)
    said = _check(both, {"name": ["jstreamer", "jecho"], "path": str(both)},
                  load={"models": {"jstreamer": {"input_data": str(prompts_file(both))}}})
    assert "confirmation: paired" in said
    assert "mlflow.pyfunc: refused: a version of this study is a Triton repository of 2 " \
           "models" in said


def test_the_rule_refuses_a_stateful_onnx_model_and_a_file_that_is_not_onnx() -> None:
    plain = model_config.parse('name: "m"\nbackend: "onnxruntime"\nmax_batch_size: 8\n')
    assert pyfunc_problem(plain) is None
    stateful = model_config.parse('name: "m"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
                                  "sequence_batching { }\n")
    assert "is stateful: its state lives in Triton's sequence batcher" in \
        str(pyfunc_problem(stateful))
    other = model_config.parse('name: "m"\nbackend: "onnxruntime"\n'
                               'default_model_filename: "model.bin"\n')
    assert "is not a .onnx file" in str(pyfunc_problem(other))
    assert "repository of 2 models" in str(pyfunc_problem(plain, models=2))


@pytest.mark.parametrize("design", ["auto", "paired"])
def test_a_single_model_pairs_unless_asked_otherwise(tmp_path: Path, design: str) -> None:
    onnx = models.dynamic_batch(tmp_path / "model.onnx")
    said = _check(tmp_path, {"name": "m", "path": str(onnx)}, confirm={"design": design})
    assert "confirmation: paired" in said
