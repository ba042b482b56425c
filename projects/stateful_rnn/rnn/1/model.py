"""A tiny recurrent cell with one hidden state per sequence (a stand-in for a streaming
speech or tracking model). Each execute pays a fixed cost (FIXED_S, like a kernel launch) and
a small cost per request, so batching steps of several sequences pays off; the hidden state
of each sequence lives in this instance between its steps, keyed by its correlation ID."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils

FIXED_S, PER_REQUEST_S = 0.002, 0.0002
HIDDEN, FRAME = 32, 16


def _scalar(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().ravel()[0]


class TritonPythonModel:
    def initialize(self, args):
        rng = np.random.default_rng(0)
        self.w_in = rng.normal(0, 0.3, (FRAME, HIDDEN)).astype(np.float32)
        self.w_h = rng.normal(0, 0.3, (HIDDEN, HIDDEN)).astype(np.float32)
        self.states = {}

    def execute(self, requests):
        time.sleep(FIXED_S + PER_REQUEST_S * len(requests))
        frames, states, keys, errors = [], [], [], {}
        for i, r in enumerate(requests):
            cid = int(_scalar(r, "CORRID"))
            if _scalar(r, "START"):
                self.states[cid] = (np.zeros(HIDDEN, np.float32), 0)
            if cid not in self.states:
                errors[i] = f"sequence {cid} has no state: it never started here"
                continue
            frames.append(pb_utils.get_input_tensor_by_name(r, "FRAME").as_numpy()[0])
            states.append(self.states[cid][0])
            keys.append((i, cid, bool(_scalar(r, "END"))))
        if frames:  # one step of every sequence in this batch at once
            new = np.tanh(np.stack(frames) @ self.w_in + np.stack(states) @ self.w_h)
        out = [None] * len(requests)
        for row, (i, cid, end) in enumerate(keys):
            steps = self.states[cid][1] + 1
            self.states[cid] = (new[row], steps)
            out[i] = pb_utils.InferenceResponse([
                pb_utils.Tensor("HIDDEN", new[row][np.newaxis]),
                pb_utils.Tensor("STEPS", np.array([[steps]], dtype=np.int64))])
            if end:
                del self.states[cid]
        for i, message in errors.items():
            out[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
        return out
