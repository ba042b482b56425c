"""tritonclient's exceptions become ours in one place (triton/client.py ``triton_errors``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

from tracker.errors import ModelLoadError, ServerError, SpecError
from tracker.triton.client import TritonClient, triton_errors
from tracker.triton.endpoints import Endpoints
from tracker.triton.server.ports import free_ports

PKG = Path(__file__).resolve().parents[2] / "tracker"


def test_an_inference_server_exception_keeps_tritons_message() -> None:
    with pytest.raises(ServerError) as caught, triton_errors("loading failed"):
        raise InferenceServerException("[StatusCode.INVALID_ARGUMENT] bad config",
                                       status="StatusCode.INVALID_ARGUMENT")
    assert caught.value.reason == "loading failed: bad config"
    with pytest.raises(ModelLoadError, match=r"^no such model$"), \
            triton_errors(error=ModelLoadError):
        raise InferenceServerException("no such model")


def test_our_errors_pass_through_unchanged() -> None:
    original = SpecError(["x"])
    with pytest.raises(SpecError) as caught, triton_errors("anything"):
        raise original
    assert caught.value is original


def test_a_server_that_is_not_there_is_a_server_error() -> None:
    (port,) = free_ports(1)
    with TritonClient(Endpoints("127.0.0.1", None, port, None), timeout_s=2) as client:
        assert not client.is_ready()
        with pytest.raises(ServerError, match=r"reading the config of model 'm' failed: "):
            client.model_config("m")
        with pytest.raises(ServerError, match=r"whether model 'm' is ready"):
            client.model_ready("m", version=2)


def _grpc_attribute_uses(path: Path) -> list[int]:
    return [node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and node.attr == "grpc"
            and isinstance(node.value, ast.Attribute | ast.Name)
            and getattr(node.value, "attr", getattr(node.value, "id", "")) == "client"]


def test_no_module_above_the_client_reaches_into_tritonclient() -> None:
    used = {str(p.relative_to(PKG)): _grpc_attribute_uses(p) for p in PKG.rglob("*.py")
            if p.name != "client.py"}
    assert not {k: v for k, v in used.items() if v}, used
    catches = ast.dump(ast.parse((PKG / "triton" / "client.py").read_text())).count(
        "ExceptHandler(type=Name(id='Exception'")
    assert catches == 1, "one choke point for tritonclient's exceptions"


def test_the_scan_sees_a_reach_into_the_grpc_client(tmp_path: Path) -> None:
    fake = tmp_path / "x.py"
    fake.write_text("def f(self):\n    return self.client.grpc.infer('m', [])\n")
    assert _grpc_attribute_uses(fake) == [2]
