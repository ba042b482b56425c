"""A stateful model in `tracker check` and the search space: the sequence batcher is kept,
its own knobs make the default space, and bad sequence settings are clear errors (no
traceback). Python-backend model directories made in tmp; nothing is served."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracker.cli import cli
from tracker.errors import ConfigError, SpecError
from tracker.search.space import check_space, default_space
from tracker.triton import model_config, sequence
from tracker.triton.configuration import Configuration

CONTROLS = ('control_input ['
            '{ name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] },'
            '{ name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: @CORRID@ }] }]')
STATE = ('state [{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 '
         'dims: [4] }]')


def config_text(mbs: int = 8, corrid: str = "TYPE_UINT64", dims: str = "[1]",
                extra: str = "") -> str:
    return (f'name: "acc" backend: "python" max_batch_size: {mbs}\n'
            f'sequence_batching {{ {CONTROLS.replace("@CORRID@", corrid)} {extra} }}\n'
            f'input [{{ name: "INPUT" data_type: TYPE_INT32 dims: {dims} }}]\n'
            'output [{ name: "SUM" data_type: TYPE_INT64 dims: [1] }]\n')


def project(tmp_path: Path, load: str = "", space: str = "", **kw: str) -> Path:
    model = tmp_path / "acc"
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (model / "config.pbtxt").write_text(config_text(**kw))  # type: ignore[arg-type]
    spec = tmp_path / "study.yaml"
    spec.write_text(f"model: {{name: acc, path: acc}}\nload: {{concurrency: [1, 4]{load}}}\n"
                    f"search: {{n_trials: 4{space}}}\n")
    return spec


def info(**kw: str) -> model_config.ModelInfo:
    return model_config.ModelInfo(model_config.parse(config_text(**kw)),  # type: ignore[arg-type]
                                  True, Path("acc"), format="python")


def test_default_space_keeps_the_sequence_batcher_and_tunes_its_knobs() -> None:
    space = default_space(info())
    assert sequence.STRATEGY in space and not any(k.startswith("dynamic_batching.")
                                                  for k in space)
    assert set(space) == {"max_batch_size", "instance_group.count", sequence.STRATEGY,
                          "sequence_batching.oldest.max_candidate_sequences",
                          "sequence_batching.oldest.max_queue_delay_microseconds"}
    cfg = model_config.apply(info(), {k: v[-1] for k, v in space.items()  # type: ignore[index]
                                      if isinstance(v, list)})
    assert cfg.HasField("sequence_batching") and not cfg.HasField("dynamic_batching")
    assert cfg.sequence_batching.oldest.max_candidate_sequences == 64
    assert [c.name for c in cfg.sequence_batching.control_input] == ["START", "CORRID"]


def test_direct_strategy_drops_the_oldest_knobs_and_state_is_kept() -> None:
    base = info(extra=STATE)
    cfg = model_config.apply(base, {sequence.STRATEGY: "direct",
                                    "sequence_batching.oldest.max_candidate_sequences": 16,
                                    "instance_group.count": 2})
    assert cfg.sequence_batching.HasField("direct")
    assert not cfg.sequence_batching.HasField("oldest")
    assert cfg.sequence_batching.state == base.config.sequence_batching.state
    with pytest.raises(ConfigError, match="must be one of"):
        model_config.apply(base, {sequence.STRATEGY: "newest"})


def test_a_dynamic_batching_knob_is_refused_naming_the_sequence_knobs() -> None:
    with pytest.raises(SpecError, match=r"sequence_batching\.strategy"):
        check_space({"dynamic_batching.max_queue_delay_microseconds": [0, 100]},
                    Configuration.of(info()))
    with pytest.raises(ConfigError, match="keeps it in every trial"):
        model_config.apply(info(), {"dynamic_batching.max_queue_delay_microseconds": 100})


def test_check_shows_controls_sequences_and_knobs(tmp_path: Path) -> None:
    spec = project(tmp_path, load=", sequence: {length: {low: 2, high: 9}, seed: 4}")
    result = CliRunner().invoke(cli, ["check", str(spec)])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "stateful: yes, sequence batcher kept in every trial (strategy direct)" in out
    assert "START 'START'" in out and "CORRID 'CORRID'" in out
    assert "2-9 steps per sequence (drawn with seed 4)" in out
    assert "concurrency = sequences in flight" in out and "unsigned integers" in out
    assert "perf_sequence_throughput" in out
    assert "sequence_batching.strategy" in out and "dynamic_batching.max_queue" not in out


def test_check_reads_perf_analyzers_sequence_layout(tmp_path: Path) -> None:
    data = tmp_path / "seqs.json"
    data.write_text(json.dumps({"data": [[{"INPUT": [1]}, {"INPUT": [2]}], [{"INPUT": [3]}]]}))
    spec = project(tmp_path, load=f", input_data: {data}")
    result = CliRunner().invoke(cli, ["check", str(spec)])
    assert result.exit_code == 0, result.stderr
    assert "2 sequences from" in result.stdout and "3 steps, 1-2 per sequence" in result.stdout


@pytest.mark.parametrize(("kw", "fragment"), [
    ({"load": ", sequence: {length: 0}"},
     "a sequence length must be >= 1 (requests per sequence), but got 0"),
    ({"load": ", sequence: {ids: uint}", "corrid": "TYPE_STRING"},
     "load.sequence.ids: load.sequence.ids is 'uint', but model 'acc''s CORRID control "
     "'CORRID' is TYPE_STRING"),
    ({"space": ", space: {dynamic_batching.max_queue_delay_microseconds: [0, 100]}"},
     "search.space.dynamic_batching.max_queue_delay_microseconds: the model is stateful"),
    ({"dims": "[-1]"}, "has variable dims"),
    ({"load": ", repeat: {pct: 90}"},
     "load.repeat: model 'acc' is stateful (it has a sequence batcher)"),
])
def test_bad_sequence_settings_are_clear_errors(tmp_path: Path, kw: dict[str, str],
                                                fragment: str) -> None:
    result = CliRunner().invoke(cli, ["check", str(project(tmp_path, **kw))])
    assert result.exit_code == 1, result.stdout
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def _joint(tmp_path: Path, load: str) -> Path:
    """A repository of a plain model and the stateful ``acc``, both entry models."""
    project(tmp_path / "repo")
    (tmp_path / "repo" / "study.yaml").unlink()
    plain = tmp_path / "repo" / "plain"
    (plain / "1").mkdir(parents=True)
    (plain / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (plain / "config.pbtxt").write_text(
        'name: "plain" backend: "python" max_batch_size: 8\n'
        'input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]\n')
    spec = tmp_path / "study.yaml"
    spec.write_text(f"model: {{name: [plain, acc], path: repo}}\n"
                    f"load: {{concurrency: [1, 4]{load}}}\nsearch: {{n_trials: 4}}\n")
    return spec


def test_a_stateful_entry_among_several_is_checked_as_one(tmp_path: Path) -> None:
    """The second entry's sequences are described and checked as the first entry's would
    be: its load.models.<name> section gives them, and load.repeat there is refused."""
    ok = _joint(tmp_path / "ok", ", models: {acc: {sequence: {length: 3}}}")
    result = CliRunner().invoke(cli, ["check", str(ok)])
    assert result.exit_code == 0, result.stderr
    assert "stateful: yes, sequence batcher kept in every trial" in result.stdout
    assert "3 steps per sequence" in result.stdout
    bad = _joint(tmp_path / "bad", ", models: {acc: {repeat: {pct: 90}}}")
    result = CliRunner().invoke(cli, ["check", str(bad)])
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert "load.repeat: model 'acc' is stateful" in result.stderr


def test_load_sequence_on_a_model_without_a_sequence_batcher(tmp_path: Path) -> None:
    spec = project(tmp_path, load=", sequence: {length: 4}")
    cfg = tmp_path / "acc" / "config.pbtxt"
    cfg.write_text('name: "acc" backend: "python" max_batch_size: 8\n'
                   'input [{ name: "INPUT" data_type: TYPE_INT32 dims: [1] }]\n'
                   'output [{ name: "SUM" data_type: TYPE_INT64 dims: [1] }]\n')
    result = CliRunner().invoke(cli, ["check", str(spec)])
    assert result.exit_code == 1
    assert "load.sequence: load.sequence is set, but model 'acc' has no sequence batcher" \
        in result.stderr


def test_trials_that_differ_only_in_knobs_that_do_not_act_are_the_same() -> None:
    from tracker.search.optuna_study import same_params

    direct = {sequence.STRATEGY: "direct", "max_batch_size": 8,
              "sequence_batching.oldest.max_candidate_sequences": 4}
    assert same_params(direct, {**direct, "sequence_batching.oldest.max_candidate_sequences": 64})
    oldest = {**direct, sequence.STRATEGY: "oldest"}
    assert not same_params(oldest,
                           {**oldest, "sequence_batching.oldest.max_candidate_sequences": 64})
    prefixed = {f"rnn/{k}": v for k, v in direct.items()}
    assert same_params(prefixed, {**prefixed,
                                  "rnn/sequence_batching.oldest.max_candidate_sequences": 16})
