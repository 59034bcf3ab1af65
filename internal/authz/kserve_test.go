package authz

import (
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// fullMethods lists every RPC of a service descriptor.
func fullMethods(sd *grpc.ServiceDesc) []string {
	var out []string
	for _, m := range sd.Methods {
		out = append(out, "/"+sd.ServiceName+"/"+m.MethodName)
	}
	for _, s := range sd.Streams {
		out = append(out, "/"+sd.ServiceName+"/"+s.StreamName)
	}
	return out
}

func TestKServeMethodGroupCoversEveryRPC(t *testing.T) {
	want := map[string]struct {
		group string
		need  Role
	}{
		"ServerLive":                   {GroupHealth, RoleNone},
		"ServerReady":                  {GroupHealth, RoleNone},
		"ModelReady":                   {GroupHealth, RoleNone},
		"ServerMetadata":               {GroupMetadata, RoleRead},
		"ModelMetadata":                {GroupMetadata, RoleRead},
		"ModelInfer":                   {GroupInference, RoleRead},
		"ModelStreamInfer":             {GroupInference, RoleRead},
		"ModelConfig":                  {GroupModelConfig, RoleRead},
		"ModelStatistics":              {GroupStatistics, RoleRead},
		"RepositoryIndex":              {GroupModelRepository, RoleRead},
		"RepositoryModelLoad":          {GroupModelRepository, RoleOperate},
		"RepositoryModelUnload":        {GroupModelRepository, RoleOperate},
		"SystemSharedMemoryStatus":     {GroupSharedMemory, RoleRead},
		"SystemSharedMemoryRegister":   {GroupSharedMemory, RoleOperate},
		"SystemSharedMemoryUnregister": {GroupSharedMemory, RoleOperate},
		"CudaSharedMemoryStatus":       {GroupSharedMemory, RoleRead},
		"CudaSharedMemoryRegister":     {GroupSharedMemory, RoleOperate},
		"CudaSharedMemoryUnregister":   {GroupSharedMemory, RoleOperate},
		"TraceSetting":                 {GroupTrace, RoleOperate},
		"LogSettings":                  {GroupLogging, RoleOperate},
	}
	methods := fullMethods(&pb.GRPCInferenceService_ServiceDesc)
	require.Len(t, methods, len(want), "the service gained or lost an RPC: classify it here and in kserveMethods")
	for _, m := range methods {
		t.Run(m, func(t *testing.T) {
			name := m[len("/inference.GRPCInferenceService/"):]
			w, ok := want[name]
			require.True(t, ok, "RPC %s is not classified", m)
			group, need := KServeMethodGroup(m)
			require.Contains(t, KnownGroups(), group)
			require.Equal(t, w.group, group)
			require.Equal(t, w.need, need)
			if need == RoleOperate {
				require.NotEqual(t, actionUnclassified, grpcAction(m, group), "a state-changing RPC needs an audit action")
			}
		})
	}
	for _, sd := range []*grpc.ServiceDesc{&healthpb.Health_ServiceDesc} {
		for _, m := range fullMethods(sd) {
			group, need := KServeMethodGroup(m)
			require.Equal(t, GroupHealth, group, m)
			require.Equal(t, RoleNone, need, m)
		}
	}
	for _, sd := range []*grpc.ServiceDesc{&reflectionv1.ServerReflection_ServiceDesc, &reflectionv1alpha.ServerReflection_ServiceDesc} {
		for _, m := range fullMethods(sd) {
			group, need := KServeMethodGroup(m)
			require.Equal(t, GroupMetadata, group, m)
			require.Equal(t, RoleRead, need, m)
		}
	}
	for _, m := range []string{"/inference.GRPCInferenceService/Nope", "/other.Service/ModelInfer", "", "/inference.GRPCInferenceService/"} {
		group, need := KServeMethodGroup(m)
		require.Empty(t, group, m)
		require.Equal(t, RoleOperate, need, "unknown method %q must not be open", m)
		require.Equal(t, actionUnclassified, grpcAction(m, group))
	}
}

func TestKServeHTTPGroup(t *testing.T) {
	get, post := http.MethodGet, http.MethodPost
	for _, tc := range []struct {
		method, path string
		group        string
		need         Role
		action       string // for RoleOperate
		target       string
	}{
		{get, "/v2/health/live", GroupHealth, RoleNone, "", ""},
		{get, "/v2/health/ready", GroupHealth, RoleNone, "", ""},
		{get, "/v2/models/m/ready", GroupHealth, RoleNone, "", ""},
		{get, "/v2/models/m/versions/3/ready", GroupHealth, RoleNone, "", ""},
		{get, "/v2", GroupMetadata, RoleRead, "", ""},
		{get, "/v2/models/m", GroupMetadata, RoleRead, "", ""},
		{get, "/v2/models/m/versions/1", GroupMetadata, RoleRead, "", ""},
		{post, "/v2/models/m/infer", GroupInference, RoleRead, "", ""},
		{post, "/v2/models/m/versions/2/infer", GroupInference, RoleRead, "", ""},
		{post, "/v2/models/m/generate", GroupInference, RoleRead, "", ""},
		{post, "/v2/models/m/generate_stream", GroupInference, RoleRead, "", ""},
		{get, "/v2/models/m/config", GroupModelConfig, RoleRead, "", ""},
		{get, "/v2/models/stats", GroupStatistics, RoleRead, "", ""},
		{get, "/v2/models/m/stats", GroupStatistics, RoleRead, "", ""},
		{get, "/v2/models/m/versions/1/stats", GroupStatistics, RoleRead, "", ""},
		{post, "/v2/repository/index", GroupModelRepository, RoleRead, "", ""},
		{post, "/v2/repository/main/index", GroupModelRepository, RoleRead, "", ""},
		{post, "/v2/repository/models/m/load", GroupModelRepository, RoleOperate, "repository.load", "m"},
		{post, "/v2/repository/models/m/unload", GroupModelRepository, RoleOperate, "repository.unload", "m"},
		{post, "/v2/repository/main/models/a%20b/load", GroupModelRepository, RoleOperate, "repository.load", "a b"},
		{get, "/v2/repository/models/m/load", GroupModelRepository, RoleOperate, "repository.load", "m"},
		{get, "/v2/systemsharedmemory/status", GroupSharedMemory, RoleRead, "", ""},
		{get, "/v2/systemsharedmemory/region/r0/status", GroupSharedMemory, RoleRead, "", ""},
		{post, "/v2/systemsharedmemory/region/r0/register", GroupSharedMemory, RoleOperate, "shared_memory.register", "r0"},
		{post, "/v2/systemsharedmemory/unregister", GroupSharedMemory, RoleOperate, "shared_memory.unregister", ""},
		{post, "/v2/cudasharedmemory/region/r1/unregister", GroupSharedMemory, RoleOperate, "shared_memory.unregister", "r1"},
		{get, "/v2/cudasharedmemory/status", GroupSharedMemory, RoleRead, "", ""},
		{get, "/v2/trace/setting", GroupTrace, RoleRead, "", ""},
		{http.MethodHead, "/v2/trace/setting", GroupTrace, RoleRead, "", ""},
		{post, "/v2/trace/setting", GroupTrace, RoleOperate, "trace.update", ""},
		{get, "/v2/models/m/trace/setting", GroupTrace, RoleRead, "", ""},
		{post, "/v2/models/m/trace/setting", GroupTrace, RoleOperate, "trace.update", "m"},
		{get, "/v2/logging", GroupLogging, RoleRead, "", ""},
		{post, "/v2/logging", GroupLogging, RoleOperate, "logging.update", ""},
		// Unknown shapes need operate: nothing unclassified is open.
		{get, "/", "", RoleOperate, actionUnclassified, "/"},
		{get, "/metrics", "", RoleOperate, actionUnclassified, "/metrics"},
		{get, "/v2/", "", RoleOperate, actionUnclassified, "/v2/"},
		{get, "/v2x", "", RoleOperate, actionUnclassified, "/v2x"},
		{get, "/v2/models/", "", RoleOperate, actionUnclassified, "/v2/models/"},
		{get, "/v2/models//infer", "", RoleOperate, actionUnclassified, "/v2/models//infer"},
		{post, "/v2/models/m/infer/", "", RoleOperate, actionUnclassified, "/v2/models/m/infer/"},
		{post, "/v2/models/m/versions/1/trace/setting", "", RoleOperate, actionUnclassified, "/v2/models/m/versions/1/trace/setting"},
		{post, "/v2/models/m/load", "", RoleOperate, actionUnclassified, "/v2/models/m/load"},
		{post, "/v2/repository/models/m/load/x", "", RoleOperate, actionUnclassified, "/v2/repository/models/m/load/x"},
		{post, "/v2/repository/models/m", "", RoleOperate, actionUnclassified, "/v2/repository/models/m"},
		{post, "/v2/models/a%2Fb/infer", GroupInference, RoleRead, "", ""},
		{post, "/v2/models/a/b/infer", "", RoleOperate, actionUnclassified, "/v2/models/a/b/infer"},
		{get, "/v2/health/live/x", "", RoleOperate, actionUnclassified, "/v2/health/live/x"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			group, need := KServeHTTPGroup(tc.method, tc.path)
			require.Equal(t, tc.group, group)
			require.Equal(t, tc.need, need)
			if group != "" {
				require.True(t, slices.Contains(KnownGroups(), group))
			}
			if need == RoleOperate {
				action, target := KServeHTTPAction(tc.path)
				require.Equal(t, tc.action, action)
				require.Equal(t, tc.target, target)
			}
		})
	}
}
