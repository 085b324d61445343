"""Decoupled model: each request starts a thread that reads a decoupled BLS stream
from "target" and replies with the number of responses it read (TOTAL), then FINAL.

With several requests in flight, one stub process has several threads iterating
BLS response iterators while other threads start new BLS streams.
"""

import faulthandler
import json
import signal
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # Diagnostics only: `kill -USR1 <stub pid>` prints every thread's Python
        # stack to the server log (without needing the GIL); so does a crash.
        faulthandler.enable(all_threads=True)
        faulthandler.register(signal.SIGUSR1, all_threads=True)

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._call_target, args=(request,), daemon=True).start()
        return None

    def _call_target(self, request):
        sender = request.get_response_sender()
        try:
            count = pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()
            params = json.loads(request.parameters() or "{}")  # {"empty": bool, "spin": int}
            bls = pb_utils.InferenceRequest(
                model_name="target",
                inputs=[pb_utils.Tensor("COUNT", count.astype(np.int32))],
                requested_output_names=["OUT"],
                parameters=params,
            )
            total = 0
            for response in bls.exec(decoupled=True):
                if response.has_error():
                    raise RuntimeError(response.error().message())
                total += 1
                sum(range(int(params.get("spin", 0))))  # optional pure-Python work (GIL load)
            out = pb_utils.Tensor("TOTAL", np.array([total], dtype=np.int32))
            reply = pb_utils.InferenceResponse(output_tensors=[out])
        except Exception as e:  # report errors to the client instead of stalling it
            reply = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e)))
        sender.send(reply, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
