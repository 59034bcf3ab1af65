# Dies (exit status 3) in initialize when the file CRASH next to it
# exists; tests create it after the first load to make restarts fail.
import os
import sys

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = os.path.join(args["model_repository"], args["model_version"], "CRASH")
        if os.path.exists(marker):
            sys.stderr.write("crash_init: refusing to start\n")
            os._exit(3)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "INPUT0")]) for r in requests]
