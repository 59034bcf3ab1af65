package python

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-ml/sluice/internal/infer"
)

// A model's pb_utils.MetricFamily counter, gauge and histogram are on the
// registry with the model's labels, and value() reads the counter. Before,
// MetricFamily raised "not supported".
func TestCustomMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	b, _ := testBackend(t, Options{})
	b.custom = newCustomMetrics(reg)
	cfg := testConfig(t, "cm", `backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]`)
	in := loadInstances(t, b, "cm", modelPath(t, "custom_metrics"), cfg, 1, 1)[0]
	var last []float32
	for _, x := range []float32{0.5, 5, 50} {
		outs, err := in.Execute(t.Context(), []infer.Tensor{f32Tensor("INPUT0", infer.Shape{1}, x)}, []string{"OUTPUT0"})
		if err != nil {
			t.Fatal(err)
		}
		last = f32s(t, outs[0])
	}
	if last[0] != 3 {
		t.Errorf("value() = %v, want 3", last)
	}
	want := `
# HELP input_values The inputs
# TYPE input_values histogram
input_values_bucket{kind="test",model="cm",version="1",le="1"} 1
input_values_bucket{kind="test",model="cm",version="1",le="10"} 2
input_values_bucket{kind="test",model="cm",version="1",le="+Inf"} 3
input_values_sum{kind="test",model="cm",version="1"} 55.5
input_values_count{kind="test",model="cm",version="1"} 3
# HELP last_input The last input
# TYPE last_input gauge
last_input{kind="test",model="cm",version="1"} 50
# HELP own_labels Labels of its own
# TYPE own_labels counter
own_labels{model="mine",version="7"} 6
# HELP requests_seen Requests this model saw
# TYPE requests_seen counter
requests_seen{kind="test",model="cm",version="1"} 3
`
	// The worker's metric frames precede its answer on the socket, and
	// the reader applies them in order.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "input_values", "last_input", "own_labels", "requests_seen"); err != nil {
		t.Error(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("after unload: %d series, %v; want none", n, err)
	}
}
