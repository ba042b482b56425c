"""Request inputs from the model config (every data type) or from user data files, and the
wire payloads built from them."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import service_pb2
from tritonclient.utils import deserialize_bytes_tensor

from tracker.errors import MeasurementError
from tracker.measure.inputs import input_specs, load_samples, make_samples, random_samples
from tracker.measure.transport import grpc_payloads, http_payloads
from tracker.triton import model_config

ALL_TYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16", "STRING"]


def config(inputs: str, max_batch_size: int = 8) -> object:
    return model_config.parse(
        f'name: "m" backend: "python" max_batch_size: {max_batch_size}\n{inputs}')


def one(name: str, dtype: str, dims: str, extra: str = "") -> str:
    return f'input {{ name: "{name}" data_type: TYPE_{dtype} dims: [{dims}] {extra} }}\n'


def test_random_inputs_have_every_dtype_and_the_batch_dim() -> None:
    cfg = config("".join(one(f"I_{t}", t, "2, 3") for t in ALL_TYPES))
    (sample,) = random_samples(cfg, batch_size=4)
    specs = {s.name: s for s in input_specs(cfg)}
    for t in ALL_TYPES:
        arr = sample[f"I_{t}"]
        assert arr.shape == (4, 2, 3), t
        assert arr.dtype == np.dtype(specs[f"I_{t}"].dtype), t
    strings = sample["I_STRING"].ravel()
    assert all(isinstance(s, bytes) and len(s) == 128 for s in strings)
    assert float(sample["I_FP32"].min()) >= 0.0 and float(sample["I_FP32"].max()) < 1.0
    assert int(sample["I_INT64"].max()) < 10


def test_zero_fill_makes_zeros_and_leaves_strings_random() -> None:
    cfg = config(one("X", "FP32", "2, 3") + one("I", "INT64", "4") + one("S", "STRING", "2"))
    (sample,) = make_samples(cfg, batch_size=2, fill="zero")
    assert sample["X"].shape == (2, 2, 3) and not sample["X"].any()
    assert sample["I"].dtype == np.int64 and not sample["I"].any()
    assert all(isinstance(s, bytes) and len(s) == 128 for s in sample["S"].ravel())
    (drawn,) = make_samples(cfg, batch_size=2)
    assert drawn["X"].any()                                   # random stays the default


def test_unbatched_model_uses_dims_as_the_shape() -> None:
    cfg = config(one("X", "FP32", "1, 5"), max_batch_size=0)
    (sample,) = random_samples(cfg)
    assert sample["X"].shape == (1, 5)
    with pytest.raises(MeasurementError, match=r"batch_size must be 1.*got 2"):
        random_samples(cfg, batch_size=2)


def test_batch_size_above_max_batch_size_is_refused() -> None:
    with pytest.raises(MeasurementError, match=r"<= max_batch_size \(8\), but got 9"):
        random_samples(config(one("X", "FP32", "4")), batch_size=9)


def test_variable_dims_need_user_data() -> None:
    with pytest.raises(MeasurementError, match=r"'X' has variable dims \[-1, 3\]"):
        random_samples(config(one("X", "FP32", "-1, 3")))


def test_optional_inputs_are_skipped() -> None:
    cfg = config(one("X", "FP32", "2") + one("O", "FP32", "2", "optional: true"))
    assert [s.name for s in input_specs(cfg)] == ["X"]


def test_json_in_perf_analyzers_layout(tmp_path: Path) -> None:
    cfg = config(one("X", "FP32", "2, 2") + one("S", "STRING", "1") + one("V", "INT32", "-1"))
    raw = np.array([[1, 2], [3, 4]], dtype="<f4").tobytes()
    doc = {"data": [
        {"X": [1, 2, 3, 4], "S": ["hello"], "V": {"content": [7, 8, 9], "shape": [3]}},
        {"X": {"b64": base64.b64encode(raw).decode()}, "S": ["x"], "V": [5]},
    ]}
    path = tmp_path / "data.json"
    path.write_text(json.dumps(doc))
    samples = load_samples(path, cfg, batch_size=2)
    assert len(samples) == 2
    assert samples[0]["X"].shape == (2, 2, 2)
    np.testing.assert_array_equal(samples[0]["X"][1], [[1, 2], [3, 4]])
    np.testing.assert_array_equal(samples[1]["X"][0], [[1, 2], [3, 4]])
    assert samples[0]["S"][0, 0] == b"hello"
    assert samples[0]["V"].shape == (2, 3) and samples[1]["V"].shape == (2, 1)


def test_json_errors_name_the_entry_and_input(tmp_path: Path) -> None:
    cfg = config(one("X", "FP32", "2") + one("Y", "FP32", "3"))
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"data": [{"X": [1, 2], "Y": [1, 2, 3]}, {"X": [1, 2]}]}))
    with pytest.raises(MeasurementError, match=r"data\[1\]: input 'Y' is missing"):
        load_samples(path, cfg)
    path.write_text(json.dumps({"data": [{"X": [1, 2, 3], "Y": [1, 2, 3]}]}))
    with pytest.raises(MeasurementError, match=r"'X' must have shape \[2\].*got \[3\]"):
        load_samples(path, cfg)
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(MeasurementError, match="must be"):
        load_samples(path, cfg)


def test_npz_samples_on_the_first_axis(tmp_path: Path) -> None:
    cfg = config(one("X", "FP32", "3") + one("Y", "INT64", "1"))
    path = tmp_path / "d.npz"
    np.savez(path, X=np.arange(12, dtype=np.float64).reshape(4, 3), Y=np.array([5]))
    samples = make_samples(cfg, batch_size=1, input_data=path)
    assert len(samples) == 4
    assert samples[2]["X"].dtype == np.float32
    np.testing.assert_array_equal(samples[2]["X"], [[6, 7, 8]])
    assert all(int(s["Y"][0, 0]) == 5 for s in samples)  # one sample, shared
    np.savez(path, X=np.zeros((4, 3)))
    with pytest.raises(MeasurementError, match="'Y' is missing"):
        make_samples(cfg, input_data=path)


def test_grpc_payload_round_trips(tmp_path: Path) -> None:
    cfg = config(one("X", "FP32", "2") + one("S", "STRING", "2") + one("B", "BF16", "1"))
    samples = random_samples(cfg, batch_size=3)
    types = {s.name: s.datatype for s in input_specs(cfg)}
    (data,) = grpc_payloads("m", samples, types)
    req = service_pb2.ModelInferRequest.FromString(data)
    assert req.model_name == "m"
    by_name = {t.name: (t, raw) for t, raw in zip(req.inputs, req.raw_input_contents,
                                                  strict=True)}
    x, raw_x = by_name["X"]
    assert x.datatype == "FP32" and list(x.shape) == [3, 2]
    np.testing.assert_array_equal(np.frombuffer(raw_x, dtype="<f4").reshape(3, 2),
                                  samples[0]["X"])
    s, raw_s = by_name["S"]
    assert s.datatype == "BYTES"
    assert list(deserialize_bytes_tensor(raw_s)) == list(samples[0]["S"].ravel())
    b, raw_b = by_name["B"]
    assert b.datatype == "BF16" and len(raw_b) == 3 * 2
    ((body, json_size),) = http_payloads(samples, types)
    header = json.loads(body[:json_size])
    assert {i["name"]: i["datatype"] for i in header["inputs"]} == types
