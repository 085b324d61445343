"""Decoupled model: for each request, stream COUNT responses ~1 ms apart (FINAL on the last).

Request parameter "empty": true -> responses carry no output tensor.
"""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._stream, args=(request,), daemon=True).start()
        return None

    def _stream(self, request):
        sender = request.get_response_sender()
        count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
        empty = json.loads(request.parameters() or "{}").get("empty", False)
        for i in range(count):
            outputs = [] if empty else [pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]
            last = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if i == count - 1 else 0
            sender.send(pb_utils.InferenceResponse(output_tensors=outputs), flags=last)
            time.sleep(0.001)
