package kservewire

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/infer"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

func TestParamsRoundTrip(t *testing.T) {
	in := infer.Parameters{
		"bool": true, "int64": int64(-3), "int": 7, "int32": int32(-9),
		"uint64": uint64(math.MaxUint64), "uint32": uint32(5),
		"float64": 0.5, "float32": float32(0.25), "string": "x",
		"other": 2 * time.Second,
	}
	wire := EncodeParams(in)
	require.Len(t, wire, len(in))
	got, err := reqDec.Params("request", "", wire)
	require.NoError(t, err)
	require.Equal(t, infer.Parameters{
		"bool": true, "int64": int64(-3), "int": int64(7), "int32": int64(-9),
		"uint64": uint64(math.MaxUint64), "uint32": uint64(5),
		"float64": 0.5, "float32": 0.25, "string": "x",
		"other": "2s",
	}, got)

	require.Nil(t, EncodeParams(nil))
	none, err := reqDec.Params("request", "", nil)
	require.NoError(t, err)
	require.Nil(t, none)
}

func TestParamsWithoutValue(t *testing.T) {
	tests := []struct {
		owner, name string
		param       *pb.InferParameter
		msg         string
	}{
		{"request", "", &pb.InferParameter{}, "request: parameter 'p' has no value"},
		{"response", "", nil, "response: parameter 'p' has no value"},
		{"output", "y", &pb.InferParameter{}, "output 'y': parameter 'p' has no value"},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			got, err := respDec.Params(tt.owner, tt.name, map[string]*pb.InferParameter{"p": tt.param})
			require.Nil(t, got)
			pe, ok := errors.AsType[*problemError](err)
			require.True(t, ok, "error %v not built by the ErrorFunc", err)
			require.Equal(t, BadParameter, pe.problem)
			require.Equal(t, tt.msg, pe.msg)
		})
	}
}
