"""The metric catalog (tracker/metrics.py) and everything that reads it agree."""

from __future__ import annotations

import os
from dataclasses import fields

from tracker import metrics as catalog
from tracker import spec
from tracker.measure import csvio
from tracker.measure.monitors import ProcessMonitor, parse_triton_metrics
from tracker.measure.types import Measurement
from tracker.spec import space_rules as spec_checks
from tracker.triton import model_config


def test_names_are_unique_and_the_spec_takes_exactly_them() -> None:
    assert len(catalog.NAMES) == len(set(catalog.NAMES)) == len(catalog.CATALOG)
    assert spec.METRICS == catalog.NAMES
    assert {m.name: m.better for m in catalog.CATALOG} == spec.METRIC_BETTER
    for m in catalog.CATALOG:  # every catalog name is a valid objective, nothing else is
        several = m.name == catalog.WEIGHTED_GAIN  # the score of several entry models
        model = {"name": ["a", "b"] if several else "m", "path": "." if several else "m.onnx"}
        assert spec.parse_spec({"model": model, "objectives": {m.name: m.better}}
                               ).objectives == {m.name: m.better}


def test_measurement_fields_give_the_catalog_metrics() -> None:
    attrs = {f.name for f in fields(Measurement)}
    with_field = [m for m in catalog.CATALOG if m.field is not None]
    assert all(m.field in attrs for m in with_field)
    full = Measurement(**{m.field: float(i + 1) for i, m in enumerate(with_field)
                          if m.field is not None})
    got = full.metrics()
    assert got == {m.name: float(i + 1) for i, m in enumerate(with_field)}
    # a monitor's figure passes through under its catalog name
    full.monitors["gpu_used_memory"] = 5.0
    assert full.metrics()["gpu_used_memory"] == 5.0


def test_csv_columns_are_the_catalog_columns() -> None:
    header = csvio.header([Measurement(concurrency=1, streaming=True),
                           Measurement(concurrency=2, sequence_throughput=1.0)])
    # a file of unary levels only has perf_analyzer's own columns, no streaming/sequence ones
    assert not set(csvio.header([Measurement(concurrency=1)])) & {
        *csvio.STREAM_COLUMNS, *csvio.SEQUENCE_COLUMNS}
    for m in catalog.CATALOG:
        if m.column is None:
            continue
        if m.field is not None:  # a Measurement figure: a column of the file we write
            assert m.column in header, m.name
        else:  # a GPU figure perf_analyzer reports: read into the monitor of that name
            assert csvio.GPU_COLUMNS[m.column][0] == m.name
    assert {name for name, _, _ in csvio.GPU_COLUMNS.values()} <= set(catalog.NAMES)
    # a written value comes back as the same metric (ms -> us -> ms)
    src = Measurement(concurrency=2, throughput=10.0, latency_avg_ms=2.0,
                      output_token_throughput=123.5, sequence_throughput=4.5, **{
        m.field: 1.0 + i for i, m in enumerate(catalog.CATALOG)
        if m.unit == "ms" and m.field and m.field != "latency_avg_ms"})
    (back,) = csvio.loads(csvio.dumps([src]))
    for name, value in src.metrics().items():
        assert back.metrics()[name] == value, name


def test_units_in_the_report_are_the_catalog_units() -> None:
    for m in catalog.CATALOG:
        shown = catalog.fmt(m.name, 12.5)
        assert shown == (f"12.50 {m.unit}" if m.unit else "12.50"), m.name
    assert catalog.unit("no_such_metric") == ""


def test_monitors_report_catalog_names() -> None:
    sample = ProcessMonitor([os.getpid()]).sample()
    assert sample and set(sample) <= set(catalog.NAMES)
    text = ("nv_cpu_utilization 0.25\nnv_cpu_memory_used_bytes 1048576\n"
            'nv_gpu_utilization{gpu_uuid="a"} 0.5\nnv_gpu_power_usage{gpu_uuid="a"} 70\n'
            'nv_gpu_memory_used_bytes{gpu_uuid="a"} 1048576\n')
    parsed = parse_triton_metrics(text)  # totals, and per GPU as "<metric>.<gpu>"
    assert {key.split(".")[0] for key in parsed} == {
        "cpu_utilization", "cpu_used_ram", "gpu_utilization", "gpu_power_usage",
        "gpu_used_memory"}
    assert {key.split(".")[0] for key in parsed} <= set(catalog.NAMES)


def test_load_knobs_are_the_catalog_knobs() -> None:
    assert spec_checks.LOAD_KNOBS == catalog.LOAD_KNOBS == tuple(catalog.LOAD_KNOB_MIN)
    assert all(spec_checks.MIN_VALUE[k] == v for k, v in catalog.LOAD_KNOB_MIN.items())
    assert frozenset(catalog.LOAD_KNOBS) == model_config.LOAD_PARAMS
    config, load = model_config.split_params({"concurrency": 4, "max_batch_size": 8})
    assert set(load) == set(catalog.LOAD_KNOBS) and config == {"max_batch_size": 8}
    assert catalog.load_levels_from(load) == [4.0]
    assert catalog.load_levels_from(config) is None


def test_names_with_a_model_resolve_to_their_figure() -> None:
    """``model/<step>/<figure>`` (a pipeline's composing model) and ``<model>/<metric>`` (one of
    several models measured together) carry the direction and unit of what they name."""
    for figure in catalog.STEP_METRICS:
        name = catalog.step_metric("preprocess", figure.name)
        found = catalog.lookup(name)
        assert found is not None and found.name == name
        assert (found.better, found.unit) == (figure.better, figure.unit)
        assert catalog.unit(name) == figure.unit
    assert catalog.lookup("model/preprocess/queue_ms").better == "minimize"  # type: ignore[union-attr]
    assert catalog.lookup("model/pre/batch_size").better == "maximize"  # type: ignore[union-attr]
    p99 = catalog.lookup(catalog.model_metric("resnet", "perf_latency_p99"))
    assert p99 is not None and (p99.better, p99.unit) == ("minimize", "ms")
    nested = catalog.lookup("resnet/model/pre/requests_per_s")  # a pipeline among several
    assert nested is not None and nested.better == "maximize"
    for unknown in ("model/pre/latency", "model//queue_ms", "a/b/perf_throughput",
                    "perf_nothing", "resnet/", "a/a/model/x/queue_ms"):
        assert catalog.lookup(unknown) is None, unknown
    assert catalog.lookup("perf_throughput") is catalog.BY_NAME["perf_throughput"]
