"""Top-k classes of DenseNet's output as BYTES strings ``"<score>:<index>:<label>"`` (the format
of Triton's classification extension). The weights are random, so the labels mean nothing;
the label names are ``class_<index>`` (no ImageNet label file is shipped)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.k = int(config["parameters"]["TOPK"]["string_value"])

    def execute(self, requests):
        out = []
        for request in requests:
            prob = pb_utils.get_input_tensor_by_name(request, "prob_1").as_numpy()
            prob = prob.reshape(prob.shape[0], -1)
            top = np.argsort(-prob, axis=1)[:, :self.k]
            labels = np.array([[f"{prob[i, j]:.4f}:{j}:class_{j}".encode() for j in row]
                               for i, row in enumerate(top)], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("LABELS", labels)]))
        return out
