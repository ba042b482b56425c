"""model_warmup as knobs (tracker/triton/warmup.py): a knob writes a complete warmup block for
the model's inputs (or removes it with count 0), a batch Triton's scheduler could never form is
refused, and the embedded Triton runs the block while it loads the model (its verbose log
shows each warmup run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from tests.triton.test_server_contract import trial
from tracker.errors import ConfigError
from tracker.search.knob_rules import warmup_problems
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer

BATCHED = model_config.parse(
    'name: "m" max_batch_size: 8 dynamic_batching {} '
    'input [{name: "x" data_type: TYPE_FP32 dims: [-1, 4]}, '
    '{name: "t" data_type: TYPE_STRING dims: [1]}, '
    '{name: "o" data_type: TYPE_FP32 dims: [2] optional: true}] '
    'output [{name: "y" data_type: TYPE_FP32 dims: [4]}]')


def test_a_warmup_knob_writes_a_block_for_the_models_inputs() -> None:
    cfg = model_config.apply(BATCHED, {"model_warmup.count": 3, "model_warmup.batch_size": 4},
                             supports_batching=True)
    (block,) = cfg.model_warmup
    assert (block.name, block.batch_size, block.count) == ("warmup", 4, 3)
    assert sorted(block.inputs) == ["t", "x"]  # the optional input left out
    x = block.inputs["x"]
    assert (x.data_type, list(x.dims), x.zero_data) == (model_config_pb2.TYPE_FP32, [1, 4], True)
    assert block.inputs["t"].data_type == model_config_pb2.TYPE_STRING
    again = model_config.parse(model_config.dumps(cfg))  # what config.pbtxt says
    assert again.model_warmup[0] == block


def test_count_zero_means_no_warmup_and_a_models_own_block_is_kept_otherwise() -> None:
    assert not model_config.apply(BATCHED, {"model_warmup.count": 0},
                                  supports_batching=True).model_warmup
    own = model_config.apply(BATCHED, {"model_warmup.count": 1}, supports_batching=True)
    own.model_warmup[0].name = "mine"
    own.model_warmup[0].inputs["x"].dims[:] = [3, 4]
    kept = model_config.apply(own, {"model_warmup.count": 5}, supports_batching=True)
    assert kept.model_warmup[0].name == "mine" and list(kept.model_warmup[0].inputs["x"].dims) \
        == [3, 4] and kept.model_warmup[0].count == 5
    assert not model_config.apply(own, {"model_warmup.count": 0},
                                  supports_batching=True).model_warmup


def test_a_batch_the_scheduler_could_not_form_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"at most max_batch_size \(8.*got 16"):
        model_config.apply(BATCHED, {"model_warmup.batch_size": 16}, supports_batching=True)
    assert warmup_problems({"model_warmup.batch_size": [1, 4]}, BATCHED) == []
    assert warmup_problems({"model_warmup.batch_size": [4], "max_batch_size": [2, 8]},
                           BATCHED) == [
        "search.space.model_warmup.batch_size: a warmup batch must be at most max_batch_size "
        "(2; 1 for a model that cannot batch), but may be 4"]
    stateful = model_config.parse('name: "s" max_batch_size: 4 sequence_batching {} '
                                  'input [{name: "x" data_type: TYPE_FP32 dims: [1]}]')
    (why,) = warmup_problems({"model_warmup.count": [2]}, stateful)
    assert why.startswith("search.space.model_warmup.count: model 's' is stateful")


@pytest.mark.triton
def test_triton_runs_the_warmup_while_it_loads_the_model(
        tmp_path: Path, quickstart_info: model_config.ModelInfo) -> None:
    server = LocalTritonServer()
    try:
        repo = trial(quickstart_info, tmp_path / "warm", {"model_warmup.count": 2,
                                                         "model_warmup.batch_size": 2})
        server.apply_trial(repo, ("--log-verbose=1",))
        log = server.log_text()
    finally:
        server.stop(timeout_s=0)
    served = (repo.path / repo.model_name / "config.pbtxt").read_text()
    assert "model_warmup" in served and "zero_data: true" in served
    for run in (1, 2):
        assert f"is running warmup sample 'warmup' for iteration {run}" in log, log[-3000:]
    assert "iteration 3" not in log
