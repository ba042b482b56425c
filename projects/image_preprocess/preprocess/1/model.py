"""Image preprocessing in numpy, as it runs in front of an ImageNet classifier.

IMAGE (uint8 [batch, 256, 256, 3], RGB) -> centre crop CROP x CROP (config parameter, 224)
-> float32 in [0, 1] -> (x - mean) / std per channel (ImageNet's) -> PIXELS (float32
[batch, 3, CROP, CROP]). Requests that Triton batched together arrive in one ``execute`` call
and are processed as one array, then split back into one response each.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(1, 1, 1, 3)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(1, 1, 1, 3)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.crop = int(config["parameters"]["CROP"]["string_value"])
        self.scale = (1.0 / (255.0 * STD)).astype(np.float32)
        self.shift = (MEAN / STD).astype(np.float32)

    def execute(self, requests):
        images = [pb_utils.get_input_tensor_by_name(r, "IMAGE").as_numpy() for r in requests]
        sizes = [len(x) for x in images]
        batch = np.concatenate(images) if len(images) > 1 else images[0]
        height, width = batch.shape[1:3]
        top, left = (height - self.crop) // 2, (width - self.crop) // 2
        crop = batch[:, top:top + self.crop, left:left + self.crop, :]
        pixels = crop.astype(np.float32) * self.scale - self.shift
        pixels = np.ascontiguousarray(pixels.transpose(0, 3, 1, 2))
        out, start = [], 0
        for size in sizes:
            tensor = pb_utils.Tensor("PIXELS", pixels[start:start + size])
            out.append(pb_utils.InferenceResponse([tensor]))
            start += size
        return out
