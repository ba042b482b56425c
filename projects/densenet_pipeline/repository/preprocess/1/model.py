"""Image preprocessing as in python_backend's examples/preprocessing: decode (PIL), resize to
256 x 256, centre crop 224 x 224, scale to [0, 1], normalise by ImageNet's mean and std, CHW.
Requests batched together arrive in one ``execute`` and are answered one response each."""

import io

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _pixels(data: bytes) -> np.ndarray:
    img = Image.open(io.BytesIO(data)).convert("RGB").resize((256, 256), Image.BILINEAR)
    x = np.asarray(img, dtype=np.float32)[16:240, 16:240] / 255.0
    return ((x - MEAN) / STD).transpose(2, 0, 1)


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            pixels = np.stack([_pixels(bytes(v)) for v in raw.reshape(-1)])
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("PIXELS", pixels.astype(np.float32))]))
        return out
