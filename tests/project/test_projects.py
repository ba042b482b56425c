"""The sample projects: their make_model.py scripts build valid, deterministic ONNX models that
onnxruntime runs, their study specs load, and `tracker config` describes them as Triton would."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner

from tracker.cli import cli
from tracker.spec import ServerSection, load_spec
from tracker.triton import model_config
from tracker.triton.formats import model_info
from tracker.triton.formats.onnx import from_onnx

PROJECTS = Path(__file__).resolve().parents[2] / "projects"
DENSENET = PROJECTS / "densenet_onnx"
QUICKSTART = PROJECTS / "quickstart"


def make(project: Path, output: Path, *args: str) -> float:
    """Run the project's make_model.py as a user (or ensure_model) would; seconds taken."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(project / "make_model.py"), str(output), *args],
                          cwd=project, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert output.is_file()
    return time.perf_counter() - start


@pytest.fixture(scope="session")
def densenet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """DenseNet-121 built once per session: the fixed and the dynamic-batch variants."""
    out = tmp_path_factory.mktemp("densenet")
    fixed, dynamic = out / "model.onnx", out / "model_dynamic.onnx"
    seconds = make(DENSENET, fixed)
    assert seconds < 30, f"building DenseNet-121 took {seconds:.1f} s; it should take a few"
    make(DENSENET, dynamic)  # the file name picks the dynamic variant, as study_batching.yaml
    return {"fixed": fixed, "dynamic": dynamic}


def run_once(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in session.run(None, feeds)]


def dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


# ---- densenet_onnx ----------------------------------------------------------------------------

def test_densenet_is_densenet121_and_checks(densenet: dict[str, Path]) -> None:
    model = onnx.load(str(densenet["fixed"]))
    onnx.checker.check_model(model)
    graph = model.graph
    assert [(i.name, dims(i)) for i in graph.input] == [("data_0", [1, 3, 224, 224])]
    assert [(o.name, dims(o)) for o in graph.output] == [("prob_1", [1, 1000, 1, 1])]
    convs = [n for n in graph.node if n.op_type == "Conv"]
    # stem + 2 per dense layer (6+12+24+16) + 3 transitions + classifier = 121 - 1 dense layers
    assert len(convs) == 1 + 2 * (6 + 12 + 24 + 16) + 3 + 1
    params = sum(int(np.prod(t.dims)) for t in graph.initializer
                 if not t.name.endswith(("_mean", "_var")))
    assert 7_900_000 < params < 8_100_000  # DenseNet-121 has about 8.0 M parameters
    assert graph.node[-1].op_type == "Softmax"


def test_densenet_runs_with_the_guide_shapes(densenet: dict[str, Path]) -> None:
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    (prob,) = run_once(densenet["fixed"], {"data_0": x})
    assert prob.shape == (1, 1000, 1, 1) and prob.dtype == np.float32
    assert np.isfinite(prob).all() and prob.sum() == pytest.approx(1.0, rel=1e-4)


def test_densenet_dynamic_variant_batches(densenet: dict[str, Path]) -> None:
    model = onnx.load(str(densenet["dynamic"]), load_external_data=False)
    assert dims(model.graph.input[0]) == ["batch", 3, 224, 224]
    x = np.random.default_rng(1).standard_normal((2, 3, 224, 224)).astype(np.float32)
    (prob,) = run_once(densenet["dynamic"], {"data_0": x})
    assert prob.shape == (2, 1000, 1, 1)
    info = from_onnx(densenet["dynamic"], "densenet_onnx_dynamic")
    assert info.supports_batching and list(info.config.input[0].dims) == [3, 224, 224]


def test_tracker_config_on_densenet_matches_the_guide(densenet: dict[str, Path]) -> None:
    result = CliRunner().invoke(cli, ["config", str(densenet["fixed"]), "--name",
                                      "densenet_onnx"])
    assert result.exit_code == 0, result.output
    assert "max_batch_size: 0\n" in result.output
    cfg = model_config.parse(result.output)
    assert cfg.max_batch_size == 0 and cfg.platform == "onnxruntime_onnx"
    assert [(t.name, list(t.dims)) for t in cfg.input] == [("data_0", [1, 3, 224, 224])]
    assert [(t.name, list(t.dims)) for t in cfg.output] == [("prob_1", [1, 1000, 1, 1])]
    assert model_config.dumps(cfg) == result.output


# ---- quickstart -------------------------------------------------------------------------------

def test_quickstart_builds_deterministically_and_runs(tmp_path: Path) -> None:
    first, second, other = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "c.onnx"
    make(QUICKSTART, first)
    make(QUICKSTART, second)
    make(QUICKSTART, other, "--seed", "1")
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes() != other.read_bytes()
    onnx.checker.check_model(onnx.load(str(first)))
    x = np.ones((5, 64), dtype=np.float32)
    (y,) = run_once(first, {"INPUT0": x})
    assert y.shape == (5, 16) and (y >= 0).all()
    info = from_onnx(first, "quickstart")
    assert info.supports_batching and info.config.max_batch_size == 4
    assert list(info.config.input[0].dims) == [64] and list(info.config.output[0].dims) == [16]


def test_quickstart_fixed_variant(tmp_path: Path) -> None:
    path = tmp_path / "q.onnx"
    make(QUICKSTART, path, "--batch", "fixed")
    info = from_onnx(path, "q")
    assert not info.supports_batching and list(info.config.input[0].dims) == [1, 64]


def test_retune_model_is_the_quickstart_model_changed_behind_the_same_signature(
        tmp_path: Path) -> None:
    """projects/retune: one more layer and other weights, the same name, inputs and outputs
    (what a warm start from the quickstart study compares: tracker/search/warm_start.py)."""
    from tracker.search.warm_start import signature
    from tracker.triton.configuration import Configuration

    make(QUICKSTART, tmp_path / "q.onnx")
    make(PROJECTS / "retune", tmp_path / "r.onnx")
    old, new = from_onnx(tmp_path / "q.onnx", "quickstart"), from_onnx(tmp_path / "r.onnx",
                                                                        "quickstart")
    assert signature(Configuration.of(old)) == signature(Configuration.of(new))
    assert list(new.config.output[0].dims) == list(old.config.output[0].dims)
    assert len(onnx.load(str(tmp_path / "r.onnx")).graph.node) == 6
    feed = {"INPUT0": np.ones((2, 64), np.float32)}
    assert run_once(tmp_path / "r.onnx", feed)[0].shape == (2, 16)


# ---- the study specs --------------------------------------------------------------------------

@pytest.mark.parametrize("spec_file", [QUICKSTART / "study.yaml", DENSENET / "study.yaml",
                                       DENSENET / "study_batching.yaml",
                                       PROJECTS / "retune" / "study.yaml"],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_study_specs_load_and_their_space_applies(spec_file: Path, tmp_path: Path) -> None:
    spec = load_spec(spec_file)
    assert spec.model.build == spec_file.parent / "make_model.py"
    assert spec.model.path.parent == spec_file.parent and spec.model.path.suffix == ".onnx"
    # build the model where the spec's name says (file name decides the batch variant)
    model = tmp_path / spec.model.path.name
    make(spec_file.parent, model)
    info = model_info(spec.model.model_copy(update={"path": model}))
    assert info.config == from_onnx(model, spec.model.name).config
    # every point of the space is a config Triton would accept
    space = spec.search.space
    assert space, "a sample study names its space"
    keys = list(space)
    grid: list[dict[str, object]] = [{}]
    for key in keys:
        values = space[key]
        assert isinstance(values, list)
        grid = [{**point, key: value} for point in grid for value in values]
    for point in grid:
        config_values, load_values = model_config.split_params(point)
        assert not load_values
        model_config.apply(info, config_values)


# ---- image_preprocess (a Python-backend model, no build step) ---------------------------------

def test_image_preprocess_checks_as_a_python_model_with_its_crop_knob() -> None:
    spec_path = PROJECTS / "image_preprocess" / "study.yaml"
    result = CliRunner().invoke(cli, ["check", str(spec_path)])
    assert result.exit_code == 0, result.output
    assert "python format, backend python" in result.output
    assert "IMAGE                    TYPE_UINT8   [256, 256, 3]" in result.output
    assert "parameters.CROP" in result.output
    spec = load_spec(spec_path)
    info = model_info(spec.model)
    assert info.supports_batching and info.config.max_batch_size == 8
    for count in (1, 2):  # every grid point applies to the model's own config
        for mbs in (1, 8):
            cfg = model_config.apply(info, {"instance_group.count": count, "max_batch_size": mbs})
            assert cfg.backend == "python" and list(cfg.input[0].dims) == [256, 256, 3]


def test_streaming_lm_spec_loads_and_its_space_applies() -> None:
    """projects/streaming_lm: the spec validates (its load.stream names the model's inputs),
    and every point of its space is a config Triton would accept for tiny_lm."""
    spec = load_spec(PROJECTS / "streaming_lm" / "study.yaml")
    base = model_config.load(spec.model.path / "config.pbtxt")
    assert base.model_transaction_policy.decoupled  # streamed, whatever load.stream says
    names = {i.name for i in base.input}
    stream = spec.load.stream
    assert stream.input_tokens is not None and stream.input_tokens.input in names
    assert stream.output_tokens is not None and stream.output_tokens.input in names
    assert "perf_time_to_first_token_p99" in spec.constraints
    grid: list[dict[str, object]] = [{}]
    for key, values in spec.search.space.items():
        assert isinstance(values, list)
        grid = [{**point, key: value} for point in grid for value in values]
    for point in grid:
        assert model_config.apply(base, point, supports_batching=True).max_batch_size >= 1


def test_iterative_sequence_checks_as_one_streamed_request_per_sequence() -> None:
    """projects/iterative_sequence: its model is decoupled with an iterative sequence batcher,
    and `tracker check` says the load and the output check send one streamed request per
    sequence, without ID or flags, and which steps come after the search."""
    spec = PROJECTS / "iterative_sequence" / "study.yaml"
    base = model_config.load(load_spec(spec).model.path / "config.pbtxt")
    assert base.sequence_batching.iterative_sequence and base.model_transaction_policy.decoupled
    checked = CliRunner().invoke(cli, ["check", str(spec)])
    assert checked.exit_code == 0, checked.output
    assert "stateful: yes, an iterative sequence model" in checked.output
    assert "output check: 4 probes (one streamed request each" in checked.output
    assert "confirmation: paired" in checked.output


@pytest.mark.triton
def test_stateful_rnn_answers_its_frames_file_as_one_sequence(tmp_path: Path) -> None:
    """The README's `mlflow deployments predict -t triton --name rnn --input-path frames.json`
    on a Triton serving projects/stateful_rnn/rnn: the file's three rows are the steps of one
    sequence, so the model's step count runs 1, 2, 3 (a step whose sequence never started is
    an error in that model)."""
    import json
    import os
    import shutil

    from tracker.triton.server.local import LocalTritonServer

    repo, out = tmp_path / "repo", tmp_path / "out.json"
    shutil.copytree(PROJECTS / "stateful_rnn" / "rnn", repo / "rnn")
    with LocalTritonServer(ServerSection(startup_timeout_s=60)) as server:
        server.start(repo)
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "mlflow"), "deployments", "predict", "-t",
             "triton", "--name", "rnn", "--input-path",
             str(PROJECTS / "stateful_rnn" / "frames.json"), "--output-path", str(out)],
            env={**os.environ, "TRACKER_TRITON_URL": str(server.endpoints.grpc),
                 "TRACKER_TRITON_REPOSITORY": str(repo)},
            capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answered = json.loads(out.read_text())["outputs"]
    assert answered["STEPS"] == [[1], [2], [3]]
    assert np.asarray(answered["HIDDEN"]).shape == (3, 32)


def test_densenet_pipeline_builds_checks_and_its_grid_applies(tmp_path: Path) -> None:
    """The repository is built by its script (into a scratch copy of the project), `tracker
    check` shows the ensemble's steps, and every grid point applies to its model."""
    import shutil

    from tracker.search.space import grid
    from tracker.triton.configuration import configuration_of

    project = tmp_path / "densenet_pipeline"
    shutil.copytree(PROJECTS / "densenet_pipeline", project,
                    ignore=shutil.ignore_patterns("models", "__pycache__"))
    (tmp_path / "densenet_onnx").symlink_to(DENSENET)
    result = CliRunner().invoke(cli, ["check", str(project / "study.yaml")])
    assert result.exit_code == 0, result.output
    assert "ensemble densenet_pipeline steps: preprocess -> densenet -> postprocess" \
        in result.output
    assert "8 sample(s)" in result.output and "8 configurations" in result.output
    spec = load_spec(project / "study.yaml")
    conf = configuration_of(spec.model)
    assert conf.names == ("preprocess", "densenet", "postprocess", "densenet_pipeline")
    points = grid(spec.search.space)
    for count in points["densenet/instance_group.count"]:
        cfgs = conf.apply({"densenet/instance_group.count": count,
                           "densenet/parameters.intra_op_thread_count": 1})
        assert cfgs["densenet"].instance_group[0].count == count
        assert list(cfgs["densenet"].input[0].dims) == [3, 224, 224]


def test_two_models_builds_checks_and_its_grid_applies(tmp_path: Path) -> None:
    """projects/two_models: the repository is built by its script, `tracker check` shows each
    entry with its own load and weight, and every grid point applies to both models."""
    import shutil

    from tracker.search.space import grid
    from tracker.triton.configuration import configuration_of

    project = tmp_path / "two_models"
    shutil.copytree(PROJECTS / "two_models", project,
                    ignore=shutil.ignore_patterns("models", "__pycache__"))
    (tmp_path / "densenet_onnx").symlink_to(DENSENET)
    (tmp_path / "quickstart").symlink_to(QUICKSTART)
    result = CliRunner().invoke(cli, ["check", str(project / "study.yaml")])
    assert result.exit_code == 0, result.output
    assert "densenet: concurrency 2, batch size 1, weight 1" in result.output
    assert "quickstart: concurrency 4, batch size 1, weight 1" in result.output
    assert "objectives: weighted_gain (maximize)" in result.output
    spec = load_spec(project / "study.yaml")
    conf = configuration_of(spec.model)
    assert conf.entries == ("densenet", "quickstart") and not conf.composing("densenet")
    points = grid(spec.search.space)
    for count in points["densenet/instance_group.count"]:
        for threads in points["quickstart/parameters.intra_op_thread_count"]:
            cfgs = conf.apply({"densenet/instance_group.count": count,
                               "densenet/parameters.intra_op_thread_count": 1,
                               "quickstart/parameters.intra_op_thread_count": threads})
            assert cfgs["densenet"].instance_group[0].count == count
            assert cfgs["quickstart"].parameters["intra_op_thread_count"].string_value == \
                str(threads)
            assert cfgs["quickstart"].max_batch_size == 32
