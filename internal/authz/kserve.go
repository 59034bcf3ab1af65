package authz

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// kserveService is the KServe v2 / Triton gRPC service's full name.
const kserveService = "/inference.GRPCInferenceService/"

// kserveMethod is one RPC's group, role and, when it changes state, its
// audit action.
type kserveMethod struct {
	group  string
	need   Role
	action string
}

// kserveMethods classifies every RPC of inference.GRPCInferenceService.
// A test walks the generated service descriptor, so a new RPC cannot be
// left out.
var kserveMethods = map[string]kserveMethod{
	"ServerLive":                   {GroupHealth, RoleNone, ""},
	"ServerReady":                  {GroupHealth, RoleNone, ""},
	"ModelReady":                   {GroupHealth, RoleNone, ""},
	"ServerMetadata":               {GroupMetadata, RoleRead, ""},
	"ModelMetadata":                {GroupMetadata, RoleRead, ""},
	"ModelInfer":                   {GroupInference, RoleRead, ""},
	"ModelStreamInfer":             {GroupInference, RoleRead, ""},
	"ModelConfig":                  {GroupModelConfig, RoleRead, ""},
	"ModelStatistics":              {GroupStatistics, RoleRead, ""},
	"RepositoryIndex":              {GroupModelRepository, RoleRead, ""},
	"RepositoryModelLoad":          {GroupModelRepository, RoleOperate, "repository.load"},
	"RepositoryModelUnload":        {GroupModelRepository, RoleOperate, "repository.unload"},
	"SystemSharedMemoryStatus":     {GroupSharedMemory, RoleRead, ""},
	"SystemSharedMemoryRegister":   {GroupSharedMemory, RoleOperate, "shared_memory.register"},
	"SystemSharedMemoryUnregister": {GroupSharedMemory, RoleOperate, "shared_memory.unregister"},
	"CudaSharedMemoryStatus":       {GroupSharedMemory, RoleRead, ""},
	"CudaSharedMemoryRegister":     {GroupSharedMemory, RoleOperate, "shared_memory.register"},
	"CudaSharedMemoryUnregister":   {GroupSharedMemory, RoleOperate, "shared_memory.unregister"},
	// One RPC both reads and updates the settings; it is classified by what
	// it can do.
	"TraceSetting": {GroupTrace, RoleOperate, "trace.update"},
	"LogSettings":  {GroupLogging, RoleOperate, "logging.update"},
}

// Audit actions of calls no classifier knows (they need RoleOperate).
const actionUnclassified = "unclassified"

// KServeMethodGroup classifies a gRPC full method name of the model server
// into its Triton API group and the role it needs:
//
//   - /inference.GRPCInferenceService/*: ServerLive, ServerReady and
//     ModelReady are health (RoleNone, so probes need no credential);
//     metadata, inference, model-config, statistics, the repository index
//     and the shared-memory status RPCs need RoleRead; repository load and
//     unload, shared-memory register and unregister, TraceSetting and
//     LogSettings (which can update settings) need RoleOperate.
//   - /grpc.health.v1.Health/*: health, RoleNone.
//   - server reflection (v1 and v1alpha): metadata, RoleRead.
//   - anything else: group "" and RoleOperate, so an RPC nobody classified
//     is never open.
func KServeMethodGroup(fullMethod string) (group string, need Role) {
	switch {
	case strings.HasPrefix(fullMethod, kserveService):
		if m, ok := kserveMethods[strings.TrimPrefix(fullMethod, kserveService)]; ok {
			return m.group, m.need
		}
	case strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/"):
		return GroupHealth, RoleNone
	case strings.HasPrefix(fullMethod, "/grpc.reflection.v1.ServerReflection/"),
		strings.HasPrefix(fullMethod, "/grpc.reflection.v1alpha.ServerReflection/"):
		return GroupMetadata, RoleRead
	}
	return "", RoleOperate
}

// grpcAction names the audit action of a state-changing gRPC call. Labels
// must stay bounded, so only methods a classifier knows (non-empty group)
// are named by their own name.
func grpcAction(fullMethod, group string) string {
	if name, ok := strings.CutPrefix(fullMethod, kserveService); ok {
		if m, ok := kserveMethods[name]; ok && m.action != "" {
			return m.action
		}
	}
	if group == "" {
		return actionUnclassified
	}
	return fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
}

// KServeHTTPGroup classifies a KServe v2 HTTP request (method and path,
// preferably the escaped path) of the model server into its Triton API
// group and the role it needs, with Triton's routes:
//
//	GET  /v2/health/live|ready, /v2/models/{m}[/versions/{v}]/ready  health, RoleNone
//	GET  /v2, /v2/models/{m}[/versions/{v}]                            metadata, RoleRead
//	POST /v2/models/{m}[/versions/{v}]/infer|generate|generate_stream inference, RoleRead
//	GET  /v2/models/{m}[/versions/{v}]/config                          model-config, RoleRead
//	GET  /v2/models/stats, /v2/models/{m}[/versions/{v}]/stats         statistics, RoleRead
//	POST /v2/repository[/{repo}]/index                                 model-repository, RoleRead
//	POST /v2/repository[/{repo}]/models/{m}/load|unload                model-repository, RoleOperate
//	     /v2/{system,cuda}sharedmemory[/region/{r}]/status             shared-memory, RoleRead
//	     /v2/{system,cuda}sharedmemory[/region/{r}]/register|unregister shared-memory, RoleOperate
//	     /v2/trace/setting, /v2/models/{m}/trace/setting               trace: GET RoleRead, else RoleOperate
//	     /v2/logging                                                   logging: GET RoleRead, else RoleOperate
//
// Any other path gets group "" and RoleOperate, so nothing unclassified is
// open. Only the path's shape decides (and the method, for trace and
// logging); the handler still answers a wrong method with 405 or 404.
func KServeHTTPGroup(method, path string) (group string, need Role) {
	k := classifyKServePath(path)
	if k.settings {
		if method == http.MethodGet || method == http.MethodHead {
			return k.group, RoleRead
		}
		return k.group, RoleOperate
	}
	return k.group, k.need
}

// kservePath is what the shape of a KServe path says.
type kservePath struct {
	group    string
	need     Role
	settings bool   // trace or logging settings: the method decides the role
	action   string // audit action, for RoleOperate paths
	target   string // model or region, for the audit log
}

// classifyKServePath tells a KServe (or Triton extension) HTTP path's
// group and the role it needs; an unknown path needs RoleOperate.
func classifyKServePath(path string) kservePath {
	unknown := kservePath{need: RoleOperate, action: actionUnclassified, target: path}
	s, ok := strings.CutPrefix(path, "/v2")
	if !ok {
		return unknown
	}
	if s == "" {
		return kservePath{group: GroupMetadata, need: RoleRead}
	}
	seg := strings.Split(strings.TrimPrefix(s, "/"), "/")
	if s[0] != '/' || hasEmpty(seg) {
		return unknown
	}
	switch seg[0] {
	case "health":
		if len(seg) == 2 && (seg[1] == "live" || seg[1] == "ready") {
			return kservePath{group: GroupHealth, need: RoleNone}
		}
	case "models":
		return classifyModelPath(seg[1:], unknown)
	case "repository":
		return classifyRepositoryPath(seg[1:], unknown)
	case "systemsharedmemory", "cudasharedmemory":
		return classifySharedMemoryPath(seg[1:], unknown)
	case "trace":
		if len(seg) == 2 && seg[1] == "setting" {
			return kservePath{group: GroupTrace, settings: true, need: RoleOperate, action: "trace.update"}
		}
	case "logging":
		if len(seg) == 1 {
			return kservePath{group: GroupLogging, settings: true, need: RoleOperate, action: "logging.update"}
		}
	}
	return unknown
}

// classifyRepositoryPath classifies what follows /v2/repository/: the
// index, or a model's load or unload, optionally under a named
// repository.
func classifyRepositoryPath(rest []string, unknown kservePath) kservePath {
	if len(rest) > 0 && rest[0] != "index" && rest[0] != "models" {
		rest = rest[1:] // a named repository
	}
	switch {
	case len(rest) == 1 && rest[0] == "index":
		return kservePath{group: GroupModelRepository, need: RoleRead}
	case len(rest) == 3 && rest[0] == "models" && (rest[2] == "load" || rest[2] == "unload"):
		return kservePath{group: GroupModelRepository, need: RoleOperate, action: "repository." + rest[2], target: unescape(rest[1])}
	}
	return unknown
}

// classifySharedMemoryPath classifies what follows
// /v2/systemsharedmemory/ or /v2/cudasharedmemory/: status, register or
// unregister, of all regions or of one (region/NAME/...).
func classifySharedMemoryPath(rest []string, unknown kservePath) kservePath {
	region := ""
	if len(rest) == 3 && rest[0] == "region" {
		region, rest = unescape(rest[1]), rest[2:]
	}
	if len(rest) != 1 {
		return unknown
	}
	switch rest[0] {
	case "status":
		return kservePath{group: GroupSharedMemory, need: RoleRead}
	case "register", "unregister":
		return kservePath{group: GroupSharedMemory, need: RoleOperate, action: "shared_memory." + rest[0], target: region}
	}
	return unknown
}

// classifyModelPath classifies what follows /v2/models/.
func classifyModelPath(seg []string, unknown kservePath) kservePath {
	if len(seg) == 1 && seg[0] == "stats" {
		return kservePath{group: GroupStatistics, need: RoleRead}
	}
	if len(seg) == 0 {
		return unknown
	}
	model := unescape(seg[0])
	rest := seg[1:]
	if len(rest) >= 2 && rest[0] == "trace" {
		if len(rest) == 2 && rest[1] == "setting" {
			return kservePath{group: GroupTrace, settings: true, need: RoleOperate, action: "trace.update", target: model}
		}
		return unknown
	}
	if len(rest) >= 2 && rest[0] == "versions" {
		rest = rest[2:]
	}
	switch {
	case len(rest) == 0:
		return kservePath{group: GroupMetadata, need: RoleRead}
	case len(rest) > 1:
		return unknown
	}
	switch rest[0] {
	case "ready":
		return kservePath{group: GroupHealth, need: RoleNone}
	case "infer", "generate", "generate_stream":
		return kservePath{group: GroupInference, need: RoleRead}
	case "config":
		return kservePath{group: GroupModelConfig, need: RoleRead}
	case "stats":
		return kservePath{group: GroupStatistics, need: RoleRead}
	}
	return unknown
}

// KServeHTTPAction returns the audit action and target of a state-changing
// KServe HTTP path.
func KServeHTTPAction(path string) (action, target string) {
	k := classifyKServePath(path)
	return k.action, k.target
}

func hasEmpty(seg []string) bool {
	return slices.Contains(seg, "")
}

func unescape(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}
