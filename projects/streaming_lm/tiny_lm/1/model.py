"""tiny_lm: a stand-in for a small language model on one accelerator. It is NOT a language
model: its "tokens" are a hash of the prompt and the step, and its costs are sleeps.

What it imitates is the shape of an LLM server's costs (static batching, as a plain
`generate()` server does it):
- prefill: before the first token, a batch pays `prefill_us_per_token` for every prompt token
  of every request in it (prefill is compute-bound: linear in the tokens);
- decode: then one step per generated token, each costing `step_ms` plus
  `step_ms_per_sequence` per sequence still generating (memory-bound: a bigger batch costs
  little more per step), until every request of the batch has its MAX_TOKENS tokens;
- one device: every instance of the model in a server shares one simulated accelerator (a
  file lock held during prefill and each step), so more instances overlap only the Python
  work and the waiting, not the "accelerator" time; batching is what raises tokens/s.
The costs are `time.sleep` calls under the lock: on a CPU-only machine the CPU stays free
for the server and the load generator, as a GPU would leave it.
"""

import fcntl
import hashlib
import json
import os
import tempfile
import time

import numpy as np
import triton_python_backend_utils as pb_utils

VOCABULARY = 32000


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})

        def param(key, default):
            return float(params.get(key, {}).get("string_value", default))

        self.prefill_s = param("prefill_us_per_token", 40) * 1e-6
        self.step_s = param("step_ms", 2.0) * 1e-3
        self.per_seq_s = param("step_ms_per_sequence", 0.15) * 1e-3
        # one lock per model repository: the instances of one server share the "device"
        key = hashlib.sha1(args["model_repository"].encode()).hexdigest()[:16]
        # held for the instance's life and closed in finalize(), so no context manager
        self.lock = open(os.path.join(tempfile.gettempdir(), f"tiny_lm-{key}.lock"), "a+")  # noqa: SIM115

    def _device(self, seconds):
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            time.sleep(seconds)
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)

    def execute(self, requests):
        senders, last, left = [], [], []
        prompt_tokens = 0
        for request in requests:
            ids = pb_utils.get_input_tensor_by_name(request, "INPUT_IDS").as_numpy()
            n = int(pb_utils.get_input_tensor_by_name(request, "MAX_TOKENS").as_numpy().ravel()[0])
            prompt_tokens += ids.size
            senders.append(request.get_response_sender())
            last.append(int(ids.ravel()[-1]) if ids.size else 0)
            left.append(max(n, 0))
        self._device(self.prefill_s * prompt_tokens)
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for i, n in enumerate(left):
            if n == 0:
                senders[i].send(flags=final)
        step = 0
        while any(left):
            active = [i for i, n in enumerate(left) if n]
            self._device(self.step_s + self.per_seq_s * len(active))
            for i in active:
                last[i] = (last[i] * 31 + step + 7) % VOCABULARY
                left[i] -= 1
                token = np.array([[last[i]]], dtype=np.int32)
                senders[i].send(pb_utils.InferenceResponse([pb_utils.Tensor("TOKEN", token)]),
                                flags=final if left[i] == 0 else 0)
            step += 1
        return None

    def finalize(self):
        self.lock.close()
