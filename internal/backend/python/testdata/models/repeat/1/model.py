"""A decoupled model: for each element of IN it sends one response (OUT =
the element, IDX = its index) from a thread of its own, DELAY[i]
milliseconds after the previous one, then the final flag alone. execute
returns after WAIT milliseconds, whether or not the responses are all
sent, so one instance serves several requests at once. A negative element
gets an error response instead (the request goes on)."""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(cfg):
            raise pb_utils.TritonModelException("repeat must be decoupled")
        self.out_dtype = pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(cfg, "OUT")["data_type"])
        self.idx_dtype = pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(cfg, "IDX")["data_type"])
        self.threads = []
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            if values.shape != delays.shape:
                raise pb_utils.TritonModelException("IN and DELAY differ in shape: %s and %s" % (values.shape, delays.shape))
            th = threading.Thread(target=self.respond, args=(request.get_response_sender(), values.copy(), delays.copy()))
            th.start()
            with self.lock:
                self.threads.append(th)
            time.sleep(int(wait[0]) / 1000.0)
        return None

    def respond(self, sender, values, delays):
        for i, (v, d) in enumerate(zip(values, delays)):
            time.sleep(int(d) / 1000.0)
            if v < 0:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative value %d at %d" % (v, i))))
                continue
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array([v], dtype=self.out_dtype)),
                pb_utils.Tensor("IDX", np.array([i], dtype=self.idx_dtype)),
            ]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        with self.lock:
            threads = list(self.threads)
        for th in threads:
            th.join()
