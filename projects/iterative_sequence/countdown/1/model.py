"""An iterative sequence model, written as Triton's own iterative_sequence example is: one
request is a whole sequence of STEPS iterations. Each execution answers one response (how many
iterations are left) and hands the request back to the scheduler with the RESCHEDULE flag
until none are left; the last response carries the final flag. Each iteration costs about
2 ms of CPU, as one decoding step of a small generator would.

It is not a trained network: it stands in for a model that generates a sequence one step at a
time (a token decoder, a tracker over frames) and keeps its progress per correlation ID.
"""

import time

import numpy as np
import triton_python_backend_utils as pb_utils

STEP_S = 0.002


class TritonPythonModel:
    def initialize(self, args):
        self.left = {}

    def execute(self, requests):
        for request in requests:
            sid = request.correlation_id()
            sender = request.get_response_sender()
            if sid not in self.left:  # the first iteration of this sequence
                steps = pb_utils.get_input_tensor_by_name(request, "STEPS").as_numpy()
                self.left[sid] = max(1, int(steps.ravel()[0]))
            deadline = time.perf_counter() + STEP_S
            while time.perf_counter() < deadline:  # one step's work, on the CPU
                pass
            self.left[sid] -= 1
            out = pb_utils.Tensor("LEFT", np.array([self.left[sid]], dtype=np.int32))
            if self.left[sid] > 0:
                sender.send(pb_utils.InferenceResponse([out]))
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            else:
                del self.left[sid]
                sender.send(pb_utils.InferenceResponse([out]),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
