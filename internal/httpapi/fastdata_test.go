package httpapi

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// FP32 and INT64 data arrays are read as runs (appendScalars); these cases
// put what a run must hand back to the general path in the middle of one,
// so the element an error names and its wording are the general path's.
func TestDecodeRunErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		reason string
		want   string
	}{
		{"FP32 overflow mid-run", oneInput("FP32", "[4]", "[1.5, -2, 0.25, 1e39]"), reasonValueOutOfRange, "element 3: 1e39 is out of range for FP32"},
		{"FP32 bad literal mid-run", oneInput("FP32", "[3]", "[1.5,2.,3]"), reasonInvalidJSON, "after the decimal point"},
		{"FP32 null mid-run", oneInput("FP32", "[3]", "[1.5, 2, null]"), reasonContentsMismatch, "element 2: expected a number for FP32, got null"},
		{"FP32 string mid-run", oneInput("FP32", "[3]", `[1,2,"3"]`), reasonContentsMismatch, "element 2: expected a number for FP32, got a string"},
		{"FP32 trailing comma", oneInput("FP32", "[2]", "[1.5, 2.5, ]"), reasonInvalidJSON, "a value after ','"},
		{"FP32 leading zero", oneInput("FP32", "[2]", "[1.5,01]"), reasonInvalidJSON, "after an array element"},
		{"FP32 too many", oneInput("FP32", "[2]", "[1.5,2.5,3.5,4.5]"), reasonSizeMismatch, "needs 2 elements, got more"},
		{"FP32 too few", oneInput("FP32", "[3]", "[1.5,2.5]"), reasonSizeMismatch, "needs 3 elements, got 2"},
		{"FP32 ragged", oneInput("FP32", "[2,2]", "[[1.5,2.5],[3.5]]"), reasonRaggedData, "lengths 2 and 1"},
		{"FP32 mixed levels", oneInput("FP32", "[3]", "[1.5,2.5,[3.5]]"), reasonRaggedData, "element 2"},
		{"FP32 missing comma", oneInput("FP32", "[2]", "[1.5 2.5]"), reasonInvalidJSON, "after an array element"},
		{"INT64 fraction mid-run", oneInput("INT64", "[3]", "[1, 2, 3.5]"), reasonContentsMismatch, "element 2: 3.5 is not an integer"},
		{"INT64 overflow mid-run", oneInput("INT64", "[3]", "[1,-2,9223372036854775808]"), reasonValueOutOfRange, "element 2: 9223372036854775808 is out of range for INT64"},
		{"INT64 too many", oneInput("INT64", "[2]", "[1,2,3]"), reasonSizeMismatch, "needs 2 elements, got more"},
		{"INT64 bool mid-run", oneInput("INT64", "[2]", "[1,true]"), reasonContentsMismatch, "element 1: expected a number for INT64, got a bool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeInferJSON([]byte(tc.body))
			var ie *apierr.Error
			require.True(t, errors.As(err, &ie), "error %v", err)
			require.Equal(t, tc.reason, ie.Reason, "error: %v", err)
			require.Contains(t, ie.Error(), tc.want)
		})
	}
}

// Runs read what the general path reads: every spacing JSON allows, nested
// rows, literals the fast scanners leave to strconv (subnormals, halfway
// cases, more digits than a uint64 keeps) and integral literals for INT64.
func TestDecodeRunValues(t *testing.T) {
	fp32 := []string{
		"0.299", "-1.344", "2.0", "-0", "1e-45", "16777217", "3.4028235e38",
		"0.30000001192092896", "1.00000000000000000000001", "7", "-2.5E+3",
	}
	var want []float32
	for _, s := range fp32 {
		f, err := strconv.ParseFloat(s, 32)
		require.NoError(t, err)
		want = append(want, float32(f))
	}
	for _, data := range []string{
		"[" + strings.Join(fp32, ",") + "]",
		"[ " + strings.Join(fp32, " ,\n\t") + " ]",
		"[[" + strings.Join(fp32[:5], ", ") + "],\r\n [" + strings.Join(fp32[5:10], ",") + "]]",
	} {
		n, shape := len(fp32), "[11]"
		if strings.HasPrefix(data, "[[") {
			n, shape = 10, "[2,5]"
		}
		r, err := decodeInferJSON([]byte(oneInput("FP32", shape, data)))
		require.NoError(t, err, data)
		require.Equal(t, f32s(want[:n]...), r.req.Inputs[0].Data, data)
	}

	ints := []string{"0", "-0", "1", "-1", "123456789012345678", "9223372036854775807", "-9223372036854775808", "2e3", "4.0"}
	vals := []uint64{0, 0, 1, math.MaxUint64, 123456789012345678, math.MaxInt64, 1 << 63, 2000, 4}
	r, err := decodeInferJSON([]byte(oneInput("INT64", "[9]", "[ "+strings.Join(ints, " , ")+" ]")))
	require.NoError(t, err)
	require.Equal(t, le64(vals...), r.req.Inputs[0].Data)
}
