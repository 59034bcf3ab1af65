package authzspec

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRestriction(t *testing.T) {
	for _, tc := range []struct {
		flag    string
		want    Restriction
		wantErr string
	}{
		// Triton's documented example.
		{flag: "shared-memory,model-config,model-repository,statistics,trace:admin-key=admin-value", want: Restriction{
			Groups: []string{GroupSharedMemory, GroupModelConfig, GroupModelRepository, GroupStatistics, GroupTrace},
			Key:    "admin-key", Value: "admin-value",
		}},
		{flag: "inference:infer-key=infer-value", want: Restriction{Groups: []string{GroupInference}, Key: "infer-key", Value: "infer-value"}},
		{flag: "health,metadata,logging:k=v", want: Restriction{Groups: []string{GroupHealth, GroupMetadata, GroupLogging}, Key: "k", Value: "v"}},
		// The value is everything after the first '=' that follows the ':'.
		{flag: "model-repository:key=a=b:c", want: Restriction{Groups: []string{GroupModelRepository}, Key: "key", Value: "a=b:c"}},
		{flag: "model-repository:X-Admin_Key.1=v", want: Restriction{Groups: []string{GroupModelRepository}, Key: "X-Admin_Key.1", Value: "v"}},

		{flag: "", wantErr: "missing ':'"},
		{flag: "model-repository", wantErr: "missing ':'"},
		{flag: "model-repository:key", wantErr: "missing '=' after ':'"},
		{flag: "model-repository=key:value", wantErr: "missing '=' after ':'"},
		{flag: ":k=v", wantErr: "no API group before ':'"},
		{flag: "model-repository:=v", wantErr: "empty key"},
		{flag: "model-repository:k=", wantErr: "empty value"},
		{flag: "model_repository:k=v", wantErr: `unknown API group "model_repository" (known: health, metadata, inference, shared-memory, model-config, model-repository, statistics, trace, logging)`},
		{flag: "Health:k=v", wantErr: `unknown API group "Health"`},
		{flag: "health,,metadata:k=v", wantErr: `unknown API group ""`},
		{flag: "health,:k=v", wantErr: `unknown API group ""`},
		{flag: "health, metadata:k=v", wantErr: `unknown API group " metadata"`},
		{flag: "health,health:k=v", wantErr: `API group "health" listed twice`},
		{flag: "health:my key=v", wantErr: `key "my key" is not a valid header name`},
		{flag: "health:authorization=v", wantErr: "credential header"},
		{flag: "health:X-Sluice-Token=v", wantErr: "credential header"},
		{flag: "health:k= v", wantErr: "value starts or ends with a blank"},
		{flag: "health:k=v\x01", wantErr: "control character"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			got, err := ParseRestriction(tc.flag)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.ErrorContains(t, err, "restriction ")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestRestrictionStringHidesValue(t *testing.T) {
	r, err := ParseRestriction("trace,logging:k=topsecret")
	require.NoError(t, err)
	require.Equal(t, "trace,logging:k=<redacted>", r.String())
}

func TestKnownGroups(t *testing.T) {
	g := KnownGroups()
	require.Equal(t, []string{
		"health", "metadata", "inference", "shared-memory", "model-config",
		"model-repository", "statistics", "trace", "logging",
	}, g)
	g[0] = "changed"
	require.Equal(t, GroupHealth, KnownGroups()[0], "KnownGroups must return a copy")
}
