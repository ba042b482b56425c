"""Server options at a real server (the embedded Triton): a trial with other options restarts
the server even with the reload strategy, and Triton's own startup table shows them; the
response cache answers repeated requests from the cache (its hits on the metrics endpoint);
a flag the server's --help does not list is refused before anything starts; a remote server
refuses options. (Each test restarts its server: a server per test.)"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.triton.test_server_contract import trial
from tracker.errors import ServerError
from tracker.spec import ServerSection, parse_spec
from tracker.triton import model_config
from tracker.triton.server.local import LocalTritonServer
from tracker.triton.server.options import trial_args, unknown_flag
from tracker.triton.server.remote import RemoteTritonServer

pytestmark = pytest.mark.triton

RATE = ("--rate-limit=execution_count", "--rate-limit-resource=R1:4",
        "--rate-limit-resource=R2:2")
CACHE = ("--cache-config=local,size=1048576",)


@pytest.fixture()
def server() -> Iterator[LocalTritonServer]:
    made = LocalTritonServer(ServerSection(strategy="reload"))
    try:
        yield made
    finally:
        made.stop(timeout_s=0)


def _infer(server: LocalTritonServer, values: np.ndarray) -> None:
    with grpcclient.InferenceServerClient(server.endpoints.grpc) as client:
        tensor = grpcclient.InferInput("INPUT0", list(values.shape), "FP32")
        tensor.set_data_from_numpy(values)
        client.infer("quickstart", [tensor])


def _cache_hits(server: LocalTritonServer) -> float:
    url = server.endpoints.metrics
    assert url is not None
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("nv_cache_num_hits_per_model{"))


def test_changed_options_restart_a_reload_server_and_triton_shows_them(
        server: LocalTritonServer, tmp_path: Path, quickstart_info: model_config.ModelInfo,
        ) -> None:
    assert server.apply_trial(trial(quickstart_info, tmp_path / "a", {}), ()) is False
    first = server.pids()
    limiter = {"instance_group.rate_limiter.resources.name": "R1",
               "instance_group.rate_limiter.resources.count": 2}
    assert server.apply_trial(trial(quickstart_info, tmp_path / "b", limiter), RATE) is True
    assert server.pids()[0] != first[0], "a new server process: options need a restart"
    log = server.log_text()
    assert "EXEC_COUNT" in log  # Triton's startup table: rate_limit
    assert '"name":"R1", "count":4' in log and '"name":"R2", "count":2' in log
    again = server.pids()
    assert server.apply_trial(trial(quickstart_info, tmp_path / "c", {}), RATE) is False
    assert server.pids()[0] == again[0], "same options: the reload strategy reloads"


def test_the_response_cache_answers_repeated_requests(
        server: LocalTritonServer, tmp_path: Path, quickstart_info: model_config.ModelInfo,
        ) -> None:
    server.apply_trial(trial(quickstart_info, tmp_path / "plain", {}), CACHE)
    assert "cache_enabled                    | 1" in server.log_text()
    # a reload that turns the model's cache on (Triton keeps a swapped model's cache setting:
    # the launcher unloads it first)
    repo = trial(quickstart_info, tmp_path / "cache", {"response_cache.enable": True})
    assert server.apply_trial(repo, CACHE) is False
    before = _cache_hits(server)
    x = np.ones((1, 64), dtype=np.float32)
    for _ in range(5):
        _infer(server, x)
    assert _cache_hits(server) - before == 4  # the first is a miss, the rest hits


def test_a_flag_the_server_does_not_list_is_refused(tmp_path: Path) -> None:
    spec = parse_spec({"model": {"name": "m", "path": "m.onnx"}, "server": {"options": {
        "flags": {"--log-verbose": 1, "--grpc-use-sssl": 1}}}})
    why = unknown_flag(spec.server, LocalTritonServer())
    assert why is not None and why.startswith("server.options.flags.--grpc-use-sssl: this "
                                              "tritonserver does not know the flag")
    assert "did you mean '--grpc-use-ssl'?" in why
    ok = parse_spec({"model": {"name": "m", "path": "m.onnx"}, "server": {"options": {
        "flags": {"--log-verbose": 1}}}})
    assert unknown_flag(ok.server, LocalTritonServer()) is None
    assert trial_args(ok.server) == ("--log-verbose=1",)


def test_a_remote_server_refuses_options(tmp_path: Path,
                                         quickstart_info: model_config.ModelInfo) -> None:
    remote = RemoteTritonServer("127.0.0.1:1")
    repo: Any = trial(quickstart_info, tmp_path / "r", {})
    with pytest.raises(ServerError, match="a remote server's flags are its owner's"):
        remote.apply_trial(repo, CACHE)
