"""The study spec: sample specs load, malformed ones fail with a line naming the field and the
value (never pydantic's text, never a traceback), paths resolve, models get built."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support import models
from tracker.cli import cli
from tracker.errors import ModelError, SpecError
from tracker.spec import (
    METRIC_BETTER,
    METRICS,
    ConcurrencyRange,
    Range,
    StudySpec,
    ensure_model,
    load_spec,
    parse_spec,
)

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted(REPO.glob("projects/*/study*.yaml"))
MINIMAL = """\
model:
  name: quickstart
  path: model.onnx
search:
  n_trials: 10
"""
HEAD = "model: {name: m, path: m.onnx}\n"


def write(tmp_path: Path, text: str, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def spec_error(tmp_path: Path, text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    return info.value


def test_sample_projects_exist() -> None:
    assert SAMPLES, "no projects/*/study*.yaml found: the sample projects are missing"


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: str(p.relative_to(REPO)))
def test_sample_specs_load(path: Path) -> None:
    spec = load_spec(path)
    assert spec.source == path.absolute()
    assert spec.base_dir == path.parent.absolute()
    assert spec.model.path.parent == path.parent.absolute()
    assert spec.model.build is None or spec.model.build.is_file()
    assert spec.load.concurrency_levels()


def test_minimal_spec_takes_the_documented_defaults(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    spec = load_spec(write(tmp_path, MINIMAL))
    assert spec.model.path == tmp_path / "model.onnx"
    assert spec.search.n_trials == 10 and spec.search.sampler == "tpe"
    assert spec.server.mode == "local" and spec.server.strategy == "restart"
    assert spec.load.concurrency_levels() == [1, 2, 4, 8, 16]
    assert spec.load.window_ms == 1000 and spec.load.stability_pct == 10
    assert spec.objectives == {"perf_throughput": "maximize"}
    assert spec.constraints == {} and spec.search.space == {}
    assert spec.study_name == spec.experiment_name == spec.registered_model_name == "quickstart"
    assert spec.mlflow.resolved_tracking_uri() == "sqlite:///mlflow.db"
    assert spec.resolved_storage() == f"sqlite:///{tmp_path / 'optuna.db'}"


def test_storage_and_tracking_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/runs/mlflow.db")
    spec = parse_spec({"model": {"name": "m", "path": "m.onnx"}})
    assert spec.mlflow.resolved_tracking_uri() == f"sqlite:///{tmp_path}/runs/mlflow.db"
    assert spec.resolved_storage() == f"sqlite:///{tmp_path}/runs/optuna.db"
    assert spec.search.resolved_storage() == f"sqlite:///{tmp_path}/optuna.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert spec.resolved_storage() == f"sqlite:///{tmp_path}/optuna.db"
    spec = parse_spec({"model": {"name": "m", "path": "m.onnx"},
                       "search": {"storage": "postgresql://u@db/optuna"},
                       "mlflow": {"tracking_uri": "sqlite:///x.db"}})
    assert spec.resolved_storage() == "postgresql://u@db/optuna"
    assert spec.mlflow.resolved_tracking_uri() == "sqlite:///x.db"


def test_relative_paths_resolve_against_the_spec_folder(tmp_path: Path) -> None:
    sub = tmp_path / "proj"
    sub.mkdir()
    (sub / "make.py").write_text("")
    (sub / "base.pbtxt").write_text("")
    (sub / "data.json").write_text("{}")
    spec = load_spec(write(sub, """\
        model: {name: m, path: out/m.onnx, build: make.py, config: base.pbtxt}
        server: {binary: bin/tritonserver}
        load: {input_data: data.json}
        """))
    assert spec.model.path == sub / "out" / "m.onnx"
    assert spec.model.build == sub / "make.py"
    assert spec.model.config == sub / "base.pbtxt"
    assert spec.server.binary == sub / "bin" / "tritonserver"
    assert spec.load.input_data == sub / "data.json"


def test_full_spec_round_trips(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, """\
        model: {name: resnet.v1, path: m.onnx}
        server: {mode: remote, url: "triton:8001", startup_timeout_s: 30}
        load:
          concurrency: {start: 2, stop: 32}
          window_requests: 200
          stability_pct: 5
        objectives: {perf_throughput: maximize, perf_latency_p99: minimize}
        constraints:
          perf_latency_p99: {max: 10}
          gpu_utilization: {min: 20, max: 95}
        search:
          sampler: nsga2
          n_trials: 40
          seed: 3
          space:
            max_batch_size: {low: 1, high: 64, log: true}
            instance_group.kind: [KIND_GPU, CPU]
            dynamic_batching.max_queue_delay_microseconds: {low: 0, high: 1000, step: 250}
            parameters.intra_op_thread_count: [1, 2]
            concurrency: 16
        """))
    assert spec.server.strategy == "reload"  # a remote server cannot be restarted
    assert isinstance(spec.load.concurrency, ConcurrencyRange)
    assert spec.load.concurrency_levels() == [2, 4, 8, 16, 32]
    assert list(spec.objectives) == ["perf_throughput", "perf_latency_p99"]
    assert spec.constraints["gpu_utilization"].min == 20
    space = spec.search.space
    assert isinstance(space["max_batch_size"], Range) and space["max_batch_size"].log
    assert space["concurrency"] == [16]  # a scalar pins the knob
    assert space["instance_group.kind"] == ["KIND_GPU", "CPU"]
    again = parse_spec(spec.model_dump(mode="json"), base_dir=tmp_path / "elsewhere")
    assert again.model_dump() == spec.model_dump()  # paths are absolute once loaded


def test_concurrency_levels_sorted_and_unique(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, HEAD + "load: {concurrency: [8, 1, 8, 2]}\n"))
    assert spec.load.concurrency_levels() == [1, 2, 8]
    spec = load_spec(write(tmp_path, HEAD + "load: {concurrency: {start: 3, stop: 20}}\n"))
    assert spec.load.concurrency_levels() == [3, 6, 12]


def test_metrics_follow_design() -> None:
    # 15 of DESIGN.md plus 11 of streaming models (TTFT and ITL avg/p50/p90/p95/p99, tokens/s)
    # plus weighted_gain, the score of several entry models measured together, plus the 5 of
    # Triton's response cache (hit ratio, hits/s, misses/s, hit and miss times), plus 5 of
    # stateful models (sequences/s, whole-sequence latency avg/p50/p90/p99), plus open-loop
    # goodput (req/s, %) and the capacity search's 6 (capacity, its bracket, probes, replicas,
    # cost per million)
    assert len(METRICS) == 45 and METRICS[0] == "perf_throughput"
    assert METRIC_BETTER["cache_hit_ratio"] == "maximize"
    assert METRIC_BETTER["perf_sequence_throughput"] == "maximize"
    assert METRIC_BETTER["perf_sequence_latency_p99"] == "minimize"
    assert METRIC_BETTER["weighted_gain"] == "maximize"
    assert METRIC_BETTER["perf_throughput"] == "maximize"
    assert METRIC_BETTER["perf_latency_p99"] == "minimize"
    assert METRIC_BETTER["perf_time_to_first_token_p99"] == "minimize"
    assert METRIC_BETTER["perf_output_token_throughput"] == "maximize"


# (spec text after the model line, or a whole spec starting with "!", expected fragment)
MALFORMED = [
    ("load: {concurency: [1, 2]}", "load.concurency: unknown field; did you mean 'concurrency'?"),
    ("serverr: {}", "serverr: unknown field; did you mean 'server'?"),
    ("server: {backend: python}", "server.backend was renamed server.serving"),
    ("search: {space: {max_batch_size: {low: 64, high: 1}}}",
     "search.space.max_batch_size: `low <= high` must hold, but got (low=64, high=1)"),
    ("search: {space: {instance_group.cnt: [1, 2]}}",
     "search.space.instance_group.cnt: unknown knob; did you mean 'instance_group.count'?"),
    ("search: {space: {dynamic_batching: [1]}}",
     "search.space.dynamic_batching: 'dynamic_batching' is a message, not a value"),
    ("search: {space: {instance_group.kind: [KIND_GPU, TPU]}}",
     "search.space.instance_group.kind[1]: must be one of 'KIND_AUTO'"),
    ("search: {space: {instance_group.count: [1, 2.5]}}",
     "search.space.instance_group.count[1]: must be an integer, but got 2.5"),
    ("search: {space: {instance_group.count: [0, 1]}}",
     "search.space.instance_group.count[0]: must be >= 1, but got 0"),
    ("search: {space: {max_batch_size: [1, 1]}}", "search.space.max_batch_size[1]: lists 1 more"),
    ("search: {space: {max_batch_size: {low: 1, high: 8, hgh: 3}}}",
     "search.space.max_batch_size.hgh: unknown field; did you mean 'high'?"),
    ("search: {space: {dynamic_batching.max_queue_delay_microseconds: "
     "{low: 0, high: 1000, step: 3}}}", "`high - low` must be a multiple of `step`"),
    ("search: {space: {max_batch_size: {low: 0, high: 64, log: true}}}",
     "search.space.max_batch_size.low: `low > 0` must hold for a log range, but got low=0"),
    ("search: {space: {instance_group.count: {low: 1.0, high: 4.5}}}",
     "must be an integer range (low, high and step integers) for an integer field"),
    ("search: {space: {instance_group.kind: {low: 1, high: 2}}}",
     "search.space.instance_group.kind: a range needs a numeric field"),
    ("search: {space: {concurrency: [0, 4]}}", "search.space.concurrency[0]: must be >= 1"),
    ("search: {space: {parameters: [1]}}", "'parameters.KEY'"),
    ("search: {sampler: grid, space: {parameters.x: {low: 0.1, high: 0.5}}}",
     "search.sampler: 'grid' needs a finite space, but search.space.parameters.x is a "
     "continuous range"),
    ("search: {sampler: grd}",
     "search.sampler: must be 'tpe', 'random', 'grid' or 'nsga2', but got 'grd'"),
    ("search: {n_trials: 0}", "search.n_trials: must be >= 1, but got 0"),
    ("search: {n_trials: '10'}", "search.n_trials: must be an integer, but got '10'"),
    ("search: {n_trials: true}", "search.n_trials: must be an integer, but got true"),
    ("search: {storage: optuna.db}", "search.storage: must be a database URL"),
    ("server: {mode: remote}", "server.url: required when server.mode is 'remote'"),
    ("server: {mode: remote, url: 'h:8001', strategy: restart}",
     "server.strategy: must be 'reload' when server.mode is 'remote'"),
    ("server: {mode: k8s}", "server.mode: must be 'local', 'docker' or 'remote', but got 'k8s'"),
    ("server: {http_port: 8000, grpc_port: 8000}",
     "server.grpc_port: must differ from server.http_port, but both are 8000"),
    ("server: {http_port: 70000}", "server.http_port: must be <= 65535, but got 70000"),
    ("server: {gpus: [0, -1]}", "server.gpus: must be 'all' or a list of GPU indices"),
    ("server: {shm_size: 1gb}", "server.shm_size: must be a size like '1g'"),
    ("load: {window_ms: 0}", "load.window_ms: must be >= 1, but got 0"),
    ("load: {window_requests: -5}", "load.window_requests: must be >= 1, but got -5"),
    ("load: {stability_pct: 0}", "load.stability_pct: must be > 0.0, but got 0"),
    ("load: {stability_pct: 150}", "load.stability_pct: must be <= 100.0, but got 150"),
    ("load: {concurrency: [0, 2, x]}", "load.concurrency[0]: must be >= 1, but got 0"),
    ("load: {concurrency: [1, 2, x]}", "load.concurrency[2]: must be an integer, but got 'x'"),
    ("load: {concurrency: []}", "load.concurrency: must not be empty"),
    ("load: {concurrency: {start: 64, stop: 1}}",
     "load.concurrency: `start <= stop` must hold, but got (start=64, stop=1)"),
    ("load: {concurrency: {start: 1, stp: 64}}",
     "load.concurrency.stp: unknown field; did you mean 'stop'?"),
    ("load: {input_data: x.csv}", "load.input_data: must be a .json or .npz file"),
    ("load: {request_rate: [0]}", "load.request_rate[0]: must be > 0.0, but got 0"),
    ("objectives: {perf_latncy_p99: minimize}",
     "objectives.perf_latncy_p99: unknown metric 'perf_latncy_p99'; did you mean "
     "'perf_latency_p99'?"),
    ("objectives: {perf_throughput: up}",
     "objectives.perf_throughput: must be 'maximize' or 'minimize', but got 'up'"),
    ("objectives: {}", "objectives: needs one objective (or two for a Pareto front), but got 0"),
    ("objectives: {perf_throughput: maximize, perf_latency_p99: minimize, "
     "gpu_used_memory: minimize}", "needs one objective (or two for a Pareto front), but got 3"),
    ("constraints: {perf_latency_p99: {}}", "constraints.perf_latency_p99: needs `max` or `min`"),
    ("constraints: {perf_latency_p99: {max: 10, min: 20}}",
     "constraints.perf_latency_p99: `min <= max` must hold, but got (min=20, max=10)"),
    ("constraints: {perf_latency_p99: {maximum: 10}}",
     "constraints.perf_latency_p99.maximum: unknown field; did you mean 'max'?"),
    ("constraints: {latency: {max: 10}}", "constraints.latency: unknown metric 'latency'"),
    ("constraints: {perf_latency_p99: {max: -5}}",
     "constraints.perf_latency_p99.max: must be >= 0 (perf_latency_p99 is never negative), "
     "but got -5"),
    ("load: {input_fill: zero, repeat: {pct: 50}}",
     "load.input_fill: zero makes every request the same"),
    ("constraints: {perf_latency_p99: 10}",
     "constraints.perf_latency_p99: must be a mapping (key: value), but got 10"),
    ("mlflow: {tracking_uri: 3}", "mlflow.tracking_uri: must be a string, but got 3"),
    ("!model: {name: 'my model', path: m.onnx}",
     "model.name: must be a Triton model name (letters, digits, '_', '.', '-'), but got "
     "'my model'"),
    ("!model: {name: m}", "model.path: required field is missing"),
    ("!model: {name: m, path: m.onnx, build: nope.py}", "model.build: file not found:"),
    ("!server: {}", "model: required field is missing"),
    ("!model: [m.onnx]", "model: must be a mapping (key: value), but got ['m.onnx']"),
    ("!model: {name: m, path: m.onnx}\nmodel: {name: n, path: m.onnx}",
     "line 2, column 1: invalid YAML: duplicate key 'model'"),
    ("!model: {name: m, path: m.onnx\n", "line 2, column 1: invalid YAML: expected ',' or '}'"),
    ("!- model\n- load\n", "(top level): must be a mapping of sections"),
    ("!just text", "(top level): must be a mapping of sections"),
    ("!", "the spec is empty"),
    ("!# only a comment\n", "the spec is empty"),
]


def _text(case: str) -> str:
    return case[1:] if case.startswith("!") else HEAD + case + "\n"


@pytest.mark.parametrize(("case", "fragment"), MALFORMED, ids=[m[1][:60] for m in MALFORMED])
def test_malformed_spec_names_field_and_value(tmp_path: Path, case: str, fragment: str) -> None:
    err = spec_error(tmp_path, _text(case))
    text = str(err)
    assert fragment in text, text
    assert err.messages and all(m.strip() for m in err.messages)
    for pydantic_text in ("Input should", "errors.pydantic.dev", "validation error", "[type="):
        assert pydantic_text not in text


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    err = spec_error(tmp_path, HEAD + textwrap.dedent("""\
        load: {window_ms: 0, stability_pct: 200}
        search: {n_trials: 0, space: {instance_group.cnt: [1]}}
        objectives: {perf_throughput: up}
        """))
    assert len(err.messages) == 5, err.messages
    assert [m.split(":")[0] for m in err.messages] == [
        "load.window_ms", "load.stability_pct", "objectives.perf_throughput",
        "search.n_trials", "search.space.instance_group.cnt"]


def test_missing_file_directory_and_unreadable(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="spec file not found"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="is a directory"):
        load_spec(tmp_path)
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"\xff\xfe\x00model")
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(bad)


def test_parse_spec_rejects_non_mappings() -> None:
    with pytest.raises(SpecError, match="must be a mapping of sections"):
        parse_spec([1, 2])
    with pytest.raises(SpecError, match="the spec is empty"):
        parse_spec(None)


@pytest.mark.parametrize(("case", "fragment"), MALFORMED, ids=[m[1][:60] for m in MALFORMED])
def test_cli_check_reports_bad_spec_without_traceback(tmp_path: Path, case: str,
                                                       fragment: str) -> None:
    path = write(tmp_path, _text(case))
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 1, result.output
    assert fragment in result.stderr
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_cli_check_missing_spec_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "none.yaml")])
    assert result.exit_code == 1
    assert "spec file not found" in result.stderr and "Traceback" not in result.stderr


def test_cli_check_summarises_a_valid_spec(tmp_path: Path) -> None:
    models.dynamic_batch(tmp_path / "model.onnx")
    path = write(tmp_path, MINIMAL + "constraints: {perf_latency_p99: {max: 50}}\n")
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "model: quickstart" in out
    assert "INPUT0" in out and "TYPE_FP32" in out and "[8]" in out
    assert "batching: yes" in out
    assert "objectives: perf_throughput (maximize)" in out
    assert "constraints: perf_latency_p99 <= 50" in out
    assert "search space (default for this model): 3 knobs, 84 configurations" in out
    assert "sampler: tpe, n_trials 10" in out


def test_cli_check_rejects_batching_knobs_for_an_unbatched_model(tmp_path: Path) -> None:
    models.fixed_batch(tmp_path / "model.onnx")
    path = write(tmp_path, MINIMAL.replace("n_trials: 10", "space: {max_batch_size: [4, 8]}"))
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 1
    assert "search.space.max_batch_size: the model has a fixed batch dimension" in result.stderr


BUILD_OK = """\
import sys
from pathlib import Path
Path(sys.argv[1]).write_text("built in " + Path.cwd().name)
"""


def _build_spec(tmp_path: Path, script: str | None) -> StudySpec:
    build = ""
    if script is not None:
        (tmp_path / "make.py").write_text(script)
        build = ", build: make.py"
    return load_spec(write(tmp_path, f"model: {{name: m, path: out/m.onnx{build}}}\n"))


def test_ensure_model_builds_once_in_the_spec_folder(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _build_spec(tmp_path, BUILD_OK)
    monkeypatch.chdir(tmp_path.parent)
    path = ensure_model(spec)
    assert path == tmp_path / "out" / "m.onnx"
    assert path.read_text() == f"built in {tmp_path.name}"  # cwd was the spec's folder
    path.write_text("kept")
    assert ensure_model(spec).read_text() == "kept"  # an existing model is not rebuilt
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["m.onnx"]  # no scratch left


def test_ensure_model_failing_build_shows_stderr_tail(tmp_path: Path) -> None:
    spec = _build_spec(tmp_path, "import sys\nprint('no onnx here', file=sys.stderr)\n"
                                 "sys.exit(3)\n")
    with pytest.raises(ModelError, match=r"(?s)exited with status 3.*no onnx here"):
        ensure_model(spec)
    assert not spec.model.path.exists()
    assert list((tmp_path / "out").iterdir()) == []


def test_ensure_model_build_that_writes_nothing(tmp_path: Path) -> None:
    spec = _build_spec(tmp_path, "pass\n")
    with pytest.raises(ModelError, match="did not write the path it was given"):
        ensure_model(spec)


def test_ensure_model_missing_without_build(tmp_path: Path) -> None:
    spec = _build_spec(tmp_path, None)
    with pytest.raises(ModelError, match=r"model.path: .*m.onnx does not exist, and no "
                                         r"model.build"):
        ensure_model(spec)


def _doc_block(title: str) -> str:
    text = (REPO / "docs" / "spec.md").read_text()
    section = text.split(f"## {title}", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_documented_specs_are_valid(tmp_path: Path) -> None:
    minimal = load_spec(write(tmp_path, _doc_block("The minimal spec"), "minimal.yaml"))
    assert minimal.model_dump() == load_spec(write(tmp_path, MINIMAL)).model_dump()
    (tmp_path / "base_config.pbtxt").write_text('backend: "onnxruntime"\n')
    (tmp_path / "inputs.npz").write_bytes(b"")
    full = load_spec(write(tmp_path, _doc_block("A full spec"), "full.yaml"))
    assert full.server.gpus == [0] and full.search.sampler == "nsga2"
    assert full.load.concurrency_levels() == [1, 2, 4, 8, 16, 32, 64]


def test_yaml_anchors_under_x_keys_and_merges(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, """\
        x-fast: &fast {window_ms: 300, max_tries: 4}
        model: {name: m, path: m.onnx}
        load:
          <<: *fast
          window_ms: 200
        """))
    assert (spec.load.window_ms, spec.load.max_tries) == (200, 4)
    err = spec_error(tmp_path, HEAD + "load: {window_ms: 1, window_ms: 2}\n")
    assert "line 2, column 22: invalid YAML: duplicate key 'window_ms'" in str(err)
