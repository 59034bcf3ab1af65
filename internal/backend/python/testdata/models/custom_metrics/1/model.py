"""Custom metrics, as Triton's custom_metrics example uses them: a counter
of requests, a gauge of the last input and a histogram of the inputs, each
with a label of its own; OUTPUT0 is the counter's value()."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.requests = pb_utils.MetricFamily(
            name="requests_seen", description="Requests this model saw", kind=pb_utils.MetricFamily.COUNTER
        ).Metric(labels={"kind": "test"})
        self.last = pb_utils.MetricFamily(
            name="last_input", description="The last input", kind=pb_utils.MetricFamily.GAUGE
        ).Metric(labels={"kind": "test"})
        self.inputs = pb_utils.MetricFamily(
            name="input_values", description="The inputs", kind=pb_utils.MetricFamily.HISTOGRAM
        ).Metric(labels={"kind": "test"}, buckets=[1.0, 10.0])
        # Labelled as Triton's custom_metrics example does: its own model
        # and version labels win.
        self.own = pb_utils.MetricFamily(
            name="own_labels", description="Labels of its own", kind=pb_utils.MetricFamily.COUNTER
        ).Metric(labels={"model": "mine", "version": "7"})

    def execute(self, requests):
        out = []
        for r in requests:
            x = float(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0])
            self.requests.increment(1)
            self.own.increment(2)
            self.last.set(x)
            self.inputs.observe(x)
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", np.array([self.requests.value()], dtype=np.float32))]))
        return out
