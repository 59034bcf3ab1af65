package onnxruntime

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSessionConfig(t *testing.T) {
	tests := []struct {
		name      string
		params    map[string]string
		instances int
		cpus      int
		want      sessionConfig
		wantErr   string
	}{
		{
			name: "defaults", instances: 1, cpus: 2,
			want: sessionConfig{intraThreads: 1, interThreads: 1, intraSpin: true, interSpin: true},
		},
		{
			name: "fits the cores", params: map[string]string{ParamIntraOpThreads: "2"}, instances: 1, cpus: 2,
			want: sessionConfig{intraThreads: 2, interThreads: 1, intraSpin: true, interSpin: true},
		},
		{
			name: "oversubscribed intra", params: map[string]string{ParamIntraOpThreads: "2"}, instances: 2, cpus: 2,
			want: sessionConfig{intraThreads: 2, interThreads: 1, intraSpin: false, interSpin: true},
		},
		{
			name: "oversubscribed both", params: map[string]string{ParamIntraOpThreads: "1", ParamInterOpThreads: "1"}, instances: 3, cpus: 2,
			want: sessionConfig{intraThreads: 1, interThreads: 1, intraSpin: false, interSpin: false},
		},
		{
			name: "zero means one per core", params: map[string]string{ParamIntraOpThreads: "0"}, instances: 2, cpus: 4,
			want: sessionConfig{intraThreads: 0, interThreads: 1, intraSpin: false, interSpin: true},
		},
		{
			name: "instance count 0 counts as 1", instances: 0, cpus: 1,
			want: sessionConfig{intraThreads: 1, interThreads: 1, intraSpin: true, interSpin: true},
		},
		{
			name: "graph level", params: map[string]string{ParamGraphOptLevel: " Extended "}, instances: 1, cpus: 2,
			want: sessionConfig{intraThreads: 1, interThreads: 1, intraSpin: true, interSpin: true, level: levelExtended},
		},
		{
			name: "graph level ORT name", params: map[string]string{ParamGraphOptLevel: "ORT_DISABLE_ALL"}, instances: 1, cpus: 2,
			want: sessionConfig{intraThreads: 1, interThreads: 1, intraSpin: true, interSpin: true, level: levelDisableAll},
		},
		{
			name: "unknown parameters ignored", params: map[string]string{"execution_mode": "parallel"}, instances: 1, cpus: 2,
			want: sessionConfig{intraThreads: 1, interThreads: 1, intraSpin: true, interSpin: true},
		},
		{name: "intra not a number", params: map[string]string{ParamIntraOpThreads: "one"}, wantErr: "parameter intra_op_thread_count: \"one\""},
		{name: "inter negative", params: map[string]string{ParamInterOpThreads: "-1"}, wantErr: "parameter inter_op_thread_count: \"-1\""},
		{name: "intra absurd", params: map[string]string{ParamIntraOpThreads: "100000"}, wantErr: "parameter intra_op_thread_count"},
		{name: "bad graph level", params: map[string]string{ParamGraphOptLevel: "99"}, wantErr: "parameter graph_optimization_level: \"99\""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSessionConfig(tc.params, tc.instances, tc.cpus)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
