"""A load kind is a plug-in: a kind written here, in one class and one line of the table
(:data:`tracker.measure.kinds.KINDS`), changes how a real Triton is loaded, with nothing else
of the package touched. The kind is a fixed-interval burst: every ``INTERVAL_S`` it sends a
level's worth of requests at once and waits for them, so its throughput can never pass
``level / INTERVAL_S`` however fast the server is (an upper bound no machine load can break;
a closed loop at the same level has no such bound)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from tracker.measure import kinds
from tracker.measure.kinds import KINDS, LoadKind, kinds_for
from tracker.measure.kinds.concurrency import Concurrency
from tracker.measure.kinds.load_kind import Level, Slots
from tracker.measure.sweep import EntryLoad, sweep
from tracker.spec import LoadSection, ServerSection
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer

if TYPE_CHECKING:
    from tracker.triton.model_config import ModelConfig

INTERVAL_S = 0.05
CODE = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests]
"""
CONFIG = ('name: "echo" backend: "python"\nmax_batch_size: 0\n'
          'input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]\n'
          'output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]\n'
          'instance_group [{ count: 1 kind: KIND_CPU }]\n')
FAST = {"window_ms": 500, "warmup_requests": 4, "max_tries": 4, "stability_pct": 50}


@dataclass(frozen=True)
class Burst(LoadKind):
    """Every INTERVAL_S, ``level.concurrency`` requests at once; the next burst after they
    all returned and the interval ended."""

    name: ClassVar[str] = "burst"
    level_key: ClassVar[str | None] = "concurrency"

    @classmethod
    def of(cls, config: ModelConfig, load: LoadSection) -> LoadKind | None:
        return cls() if config is not None and load.concurrency else None

    def levels(self, load: LoadSection, override: Sequence[float] | None) -> list[Level]:
        return Concurrency().levels(load, override)

    def split(self, level: Level, parts: int) -> list[Level]:
        return Concurrency().split(level, parts)

    def slots(self, gen: Slots, level: Level) -> list[Coroutine[Any, Any, None]]:
        async def bursts() -> None:
            size, i = int(level.concurrency or 1), 0
            while not gen.stopping:
                started = time.monotonic()
                for _ in range(size):
                    gen.spawn(gen.payloads[i % len(gen.payloads)])
                    i += 1
                while gen.inflight and not gen.stopping:
                    await asyncio.sleep(0.001)
                await asyncio.sleep(max(0.0, INTERVAL_S - (time.monotonic() - started)))
        return [bursts()]


@pytest.fixture()
def burst_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KINDS, Burst.name, Burst)  # the one table line


def test_a_registered_kind_replaces_the_closed_loop(burst_registered: None) -> None:
    config = model_config.parse(CONFIG)
    assert [k.name for k in kinds_for(config, LoadSection(concurrency=[4]))] == ["burst"]


def test_without_its_table_line_the_kind_is_unknown() -> None:
    config = model_config.parse(CONFIG)
    assert Burst.name not in kinds.KINDS
    assert [k.name for k in kinds_for(config, LoadSection(concurrency=[4]))] == ["concurrency"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTritonServer]:
    repo = tmp_path_factory.mktemp("burst_repo")
    (repo / "echo" / "1").mkdir(parents=True)
    (repo / "echo" / "1" / "model.py").write_text(CODE)
    (repo / "echo" / "config.pbtxt").write_text(CONFIG)
    with LocalTritonServer(ServerSection(startup_timeout_s=90)) as srv:
        srv.start(repo)
        yield srv


@pytest.mark.triton
def test_the_plugged_kind_is_what_loads_a_real_triton(server: LocalTritonServer,
                                                       burst_registered: None) -> None:
    entry = EntryLoad(model_config.parse(CONFIG), LoadSection(concurrency=[2, 6], **FAST))
    res = sweep(server.endpoints, {"echo": entry})
    assert [lv.measurements["echo"].concurrency for lv in res.levels] == [2, 6]
    for lv in res.levels:
        m = lv.measurements["echo"]
        bound = (m.concurrency or 0) / INTERVAL_S
        print(f"burst of {m.concurrency}: {m.throughput:.1f} infer/s (bound {bound:.0f}), "
              f"{m.requests} requests, server {m.server_requests}")
        assert m.valid and m.requests > 0
        assert m.server_requests is not None and m.server_requests > 0  # Triton answered them
        assert m.throughput <= bound * 1.1  # the burst schedule, not a closed loop, set it
