"""load.shared_memory: system on the embedded server: inputs and outputs in /dev/shm regions,
registered for the sweep and unregistered and unlinked after it, also when it fails."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tracker.errors import MeasurementError
from tracker.measure import shm
from tracker.measure.entry import EntryLoad
from tracker.measure.sweep import sweep
from tracker.spec import LoadSection
from tracker.triton import model_config
from tracker.triton.client import TritonClient
from tracker.triton.endpoints import Endpoints
from tracker.triton.repository import TrialRepository, write_repository
from tracker.triton.server.local import LocalTritonServer

pytestmark = pytest.mark.triton

LOAD = {"concurrency": [1, 4], "window_ms": 200, "max_tries": 3, "stability_pct": 80,
        "warmup_requests": 5, "shared_memory": "system"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, quickstart_info: model_config.ModelInfo,
           ) -> Iterator[tuple[LocalTritonServer, TrialRepository]]:
    cfg = model_config.apply(quickstart_info, {"max_batch_size": 8},
                             supports_batching=True)
    repo = write_repository(tmp_path_factory.mktemp("repo"), quickstart_info, cfg,
                            serving="python", ort_threads=(1, 1))
    with LocalTritonServer() as server:
        server.start(repo.path)
        yield server, repo


def _nothing_left(endpoints: Endpoints) -> None:
    assert shm.leftovers() == []
    with TritonClient(endpoints) as client:
        assert client.system_shm_regions() == []


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_sweep_over_shared_memory(served: tuple[LocalTritonServer, TrialRepository],
                                    protocol: str) -> None:
    server, repo = served
    load = LoadSection(**{**LOAD, "protocol": protocol, "batch_size": 2})
    got = sweep(server.endpoints, {repo.model_name: EntryLoad(
        repo.served_config, load)})
    for m in got.measurements:
        assert m.valid and m.errors == 0, m.invalid_reason
        assert m.throughput > 0
    with TritonClient(server.endpoints) as client:
        stats = client.statistics(repo.model_name)
    assert stats.success_count > 0
    _nothing_left(server.endpoints)


def test_regions_go_away_when_the_sweep_fails(
        served: tuple[LocalTritonServer, TrialRepository],
        monkeypatch: pytest.MonkeyPatch) -> None:
    server, repo = served
    seen: list[list[str]] = []

    async def broken(*args: Any, **kw: Any) -> Any:
        seen.append(shm.leftovers())
        raise RuntimeError("boom")

    monkeypatch.setattr("tracker.measure.sweep.measure_parts", broken)
    with pytest.raises(RuntimeError, match="boom"):
        sweep(server.endpoints, {repo.model_name: EntryLoad(
            repo.served_config, LoadSection(**LOAD))})
    assert len(seen[0]) == 2  # one input region, one output region while it ran
    _nothing_left(server.endpoints)


def test_a_remote_server_is_refused(served: tuple[LocalTritonServer, TrialRepository]) -> None:
    server, repo = served
    far = Endpoints("10.255.255.1", None, server.endpoints.grpc_port, None)
    with pytest.raises(MeasurementError, match="needs the server on this machine"):
        sweep(far, {repo.model_name: EntryLoad(
            repo.served_config, LoadSection(**LOAD))})
    assert shm.leftovers() == []


def test_leftovers_are_this_process_s_regions_only() -> None:
    """Another process's region (a second study or test run measuring on the machine) is not
    this one's leftover; this process's is."""
    theirs = Path("/dev/shm") / f"{shm.PREFIX}1_0000test_in"
    mine = Path("/dev/shm") / f"{shm.PREFIX}{os.getpid()}_0000test_in"
    try:
        theirs.touch()
        assert shm.leftovers() == []
        mine.touch()
        assert shm.leftovers() == [mine.name]
    finally:
        theirs.unlink(missing_ok=True)
        mine.unlink(missing_ok=True)


def test_output_sizes_follow_the_config(quickstart_info: model_config.ModelInfo) -> None:
    cfg = model_config.apply(quickstart_info, {"max_batch_size": 8}, supports_batching=True)
    assert shm.output_bytes(cfg, 4) == {o.name: 4 * 16 * 4 for o in cfg.output}
