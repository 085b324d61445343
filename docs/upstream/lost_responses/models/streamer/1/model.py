"""COUNT responses per request, INTERVAL_MS apart, each carrying its INDEX; FINAL rides on the
last. Each request's responses are sent from a thread of its own, or (parameter
`single_sender: true`) every response of the model from one sending thread."""

import json
import queue
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.outbox = None
        if parameters.get("single_sender", {}).get("string_value") == "true":
            self.outbox = queue.SimpleQueue()
            threading.Thread(target=self._send_all, daemon=True).start()

    def _send_all(self):
        while True:
            sender, response, flags = self.outbox.get()
            sender.send(response, flags=flags)

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._stream, args=(request,), daemon=True).start()
        return None

    def _stream(self, request):
        sender = request.get_response_sender()
        count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
        interval = int(pb_utils.get_input_tensor_by_name(request, "INTERVAL_MS").as_numpy()[0]) / 1000
        for index in range(count):
            time.sleep(interval)
            response = pb_utils.InferenceResponse([pb_utils.Tensor("INDEX", np.array([index], dtype=np.int32))])
            flags = FINAL if index == count - 1 else 0
            if self.outbox is not None:
                self.outbox.put((sender, response, flags))
            else:
                sender.send(response, flags=flags)
