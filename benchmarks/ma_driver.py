"""Drive Model Analyzer's own search generators offline, answered from a recorded landscape.

Runs inside the Model Analyzer venv that benchmarks/search_efficiency.py makes (it pins
optuna 3.6.1, so it cannot share the tuner's venv); it imports nothing from the tracker.

    python benchmarks/ma_driver.py LANDSCAPE.csv --mode quick|optuna --seeds 20 --p99-max 40

It does what Model Analyzer's ``ModelManager.run_models`` does, with the profiling replaced by
a look-up: the real ``ConfigCommandProfile`` (parsed by Model Analyzer's own CLI from a config
file: the model, ``cpu_only``, the p99 constraint, ``run_config_search_mode``), the real
``RunConfigGeneratorFactory`` (quick: ``QuickPlusConcurrencySweepRunConfigGenerator``, hill
climbing then the concurrency sweep of the top configurations; optuna:
``OptunaPlusConcurrencySweepRunConfigGenerator``), ``ResultManager``, ``ConstraintManager``,
``SearchParameters`` and ``AnalyzerStateManager``. Each RunConfig the generator yields is
read back (instance count, max_batch_size, concurrency) and answered with a
``RunConfigMeasurement`` holding the landscape's throughput and p99 at that point, added to
the ResultManager as ``MetricsManager.profile_models`` does; a point asked again is answered
from the first answer without cost (Model Analyzer skips a RunConfig it has measured).

A concurrency that is not a power of two (the binary search Model Analyzer runs below a
violated latency constraint) is answered by interpolating throughput and p99 linearly in
log2(concurrency) between the recorded neighbours; it still counts as a measurement.

Prints one JSON object per seed: {"seed", "points": [[count, max_batch_size, concurrency],
...]} in the order asked (repeats left out).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

MODEL = "quickstart"
# The default config the tuner derives for the quickstart model (and Triton would): dynamic
# batching, max_batch_size 4, one instance. Model Analyzer's baseline is this config.
DEFAULT_CONFIG = """name: "quickstart"
backend: "python"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { }
"""


def load(path: Path) -> dict[tuple[int, int, int], tuple[float, float]]:
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
    out: dict[tuple[int, int, int], tuple[float, float]] = {}
    for row in csv.DictReader(lines):
        if row["valid"] != "true" or row["perf_latency_p99"] == "":
            continue
        key = (int(row["instance_group.count"]), int(row["max_batch_size"]),
               int(row["concurrency"]))
        out[key] = (float(row["perf_throughput"]), float(row["perf_latency_p99"]))
    return out


def answer(table: dict[tuple[int, int, int], tuple[float, float]], count: int, mbs: int,
           conc: int) -> tuple[float, float] | None:
    if (count, mbs, conc) in table:
        return table[(count, mbs, conc)]
    lo = 2 ** math.floor(math.log2(conc))
    hi = lo * 2
    a, b = table.get((count, mbs, lo)), table.get((count, mbs, hi))
    if a is None or b is None:
        return a or b
    w = (math.log2(conc) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return (a[0] + w * (b[0] - a[0]), a[1] + w * (b[1] - a[1]))


def make_config(work: Path, mode: str, p99_max: float) -> Any:
    from model_analyzer.cli.cli import CLI
    from model_analyzer.config.input.config_command_profile import ConfigCommandProfile

    repo = work / "models"
    (repo / MODEL / "1").mkdir(parents=True, exist_ok=True)
    (repo / MODEL / "config.pbtxt").write_text(DEFAULT_CONFIG)
    (repo / MODEL / "1" / "model.py").write_text("# stand-in: never served\n")
    stub = work / "perf_analyzer"  # the config checks the binary exists; it never runs
    stub.write_text("#!/bin/sh\nexit 1\n")
    stub.chmod(0o755)
    cfg = work / "ma.yaml"
    cfg.write_text(
        f"model_repository: {repo}\n"
        f"checkpoint_directory: {work / 'ckpt'}\n"
        f"output_model_repository_path: {work / 'out'}\n"
        "override_output_model_repository: true\n"
        f"run_config_search_mode: {mode}\n"
        # the default (1024), stated so that the quick search's 2*mbs*count formula is
        # clamped to the recorded range, as Model Analyzer clamps a user-set maximum
        "run_config_search_max_concurrency: 1024\n"
        "triton_launch_mode: remote\n"
        f"perf_analyzer_path: {stub}\n"
        "profile_models:\n"
        f"  {MODEL}:\n"
        "    cpu_only: true\n"
        "    constraints:\n"
        f"      perf_latency_p99: {{max: {p99_max:g}}}\n")
    config = ConfigCommandProfile()
    cli = CLI()
    cli.add_subcommand(cmd="profile", help="", config=config)
    argv = sys.argv
    sys.argv = ["model-analyzer", "profile", "-f", str(cfg)]
    try:
        cli.parse()
    finally:
        sys.argv = argv
    return config


def measurement(run_config: Any, values: tuple[float, float]) -> Any:
    from model_analyzer.record.types.perf_latency_p99 import PerfLatencyP99
    from model_analyzer.record.types.perf_throughput import PerfThroughput
    from model_analyzer.result.run_config_measurement import RunConfigMeasurement

    rcm = RunConfigMeasurement(run_config.model_variants_name(), {})
    for mrc in run_config.model_run_configs():
        perf = mrc.perf_config()
        rcm.add_model_config_measurement(perf["model-name"],
                                         perf.extract_model_specific_parameters(),
                                         [PerfThroughput(values[0]), PerfLatencyP99(values[1])])
    return rcm


def point(run_config: Any) -> tuple[int, int, int]:
    mrc = run_config.model_run_configs()[0]
    mc = mrc.model_config_variant().model_config.get_config()
    count = int(mc.get("instance_group", [{"count": 1}])[0].get("count", 1))
    return count, int(mc.get("max_batch_size", 0)), int(mrc.perf_config()["concurrency-range"])


def run(table: dict[tuple[int, int, int], tuple[float, float]], mode: str, seed: int,
        p99_max: float) -> list[tuple[int, int, int]]:
    from model_analyzer.config.generate.model_profile_spec import ModelProfileSpec
    from model_analyzer.config.generate.model_variant_name_manager import (
        ModelVariantNameManager,
    )
    from model_analyzer.config.generate.run_config_generator_factory import (
        RunConfigGeneratorFactory,
    )
    from model_analyzer.config.generate.search_parameters import SearchParameters
    from model_analyzer.result.constraint_manager import ConstraintManager
    from model_analyzer.result.result_manager import ResultManager
    from model_analyzer.state.analyzer_state_manager import AnalyzerStateManager
    from model_analyzer.triton.model.model_config import ModelConfig

    ModelConfig._default_config_dict = {}
    with tempfile.TemporaryDirectory(prefix="ma-driver-") as tmp:
        config = make_config(Path(tmp), mode, p99_max)
        state = AnalyzerStateManager(config=config, server=None)
        state.load_checkpoint(checkpoint_required=False)
        constraints = ConstraintManager(config)
        results = ResultManager(config=config, state_manager=state,
                                constraint_manager=constraints)
        search_parameters = {}
        for model in config.profile_models:
            spec = ModelProfileSpec(model, config, None, [])
            search_parameters[model.model_name()] = SearchParameters(
                config=config, model=spec, is_bls_model=False,
                is_ensemble_model=spec.is_ensemble())
        random.seed(seed)  # Optuna mode draws its TPE seed with random.randint
        rcg = RunConfigGeneratorFactory.create_run_config_generator(
            command_config=config, state_manager=state, gpus=[],
            models=config.profile_models, client=None, result_manager=results,
            model_variant_name_manager=ModelVariantNameManager(),
            search_parameters=search_parameters, composing_search_parameters={})
        asked: list[tuple[int, int, int]] = []
        answers: dict[tuple[int, int, int], Any] = {}
        models = config.profile_models
        for run_config in rcg.get_configs():
            rcm = None
            if run_config.is_legal_combination():
                key = point(run_config)
                values = answer(table, *key)
                if values is not None:
                    if key not in answers:
                        asked.append(key)
                    rcm = measurement(run_config, values)
                    results.add_run_config_measurement(run_config, rcm)
                    answers[key] = rcm
            if rcm is not None:
                rcm.set_metric_weightings(metric_objectives=[m.objectives() for m in models])
                rcm.set_constraint_manager(constraint_manager=constraints)
                rcm.set_model_config_weighting(model_config_weights=[m.weighting()
                                                                     for m in models])
            rcg.set_last_results([rcm])
            if len(asked) > 5 * len(table):
                break
        return asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("landscape", type=Path)
    parser.add_argument("--mode", choices=("quick", "optuna"), required=True)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--p99-max", type=float, required=True)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    table = load(args.landscape)
    for seed in range(args.seeds):
        points = run(table, args.mode, seed, args.p99_max)
        print(json.dumps({"seed": seed, "points": [list(p) for p in points]}), flush=True)


if __name__ == "__main__":
    main()
