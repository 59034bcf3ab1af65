package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/pb/gatewaypb"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/testutil/harness"
	"github.com/sluice-ml/sluice/internal/tlsconfig/tlstest"
)

// The security suite (issue 11, docs/security.md) drives the real
// listeners of the binary:
//
//   - TestSecurityTokens: `serve -c` with operator tokens {ops: operate,
//     viewer: read}; every state-changing endpoint of every listener (admin,
//     KServe HTTP and gRPC, feature server) answers no credential → 401,
//     a wrong one → 401, the read token → 403 and the operate token →
//     the handler's answer; reads pass with the read token; each call
//     leaves one audit line, counted in sluice_audit_events_total.
//   - TestSecurityTLS: `serve -c` with TLS on every listener, mTLS on the
//     gateway (client certificate → client_id), Triton's restricted APIs
//     on the model server, and certificates swapped on disk (and SIGHUP)
//     picked up by the same process.
//   - TestSecurityExampleConfig: examples/parcel-eta/sluice.yaml (ports
//     rewritten, nothing else) binds every internal listener to loopback;
//     its copy with a tokenless admin port beyond loopback is refused.
//   - TestSecurityStandalone: `sluice feature-server` and `sluice
//     model-server` on every interface without credentials (warnings,
//     refused feature writes, Triton's open repository API per protocol),
//     with --security-config, and the feature server over TLS.
//
// Listeners that bind every interface do so on a free port; the tests talk
// only to 127.0.0.1.

const (
	secOpsTokenEnv = "SLUICE_SEC_IT_OPS_TOKEN"
	secOpsToken    = "sec-it-operate-5d1e07c4"
	secViewerToken = "sec-it-read-a93c2f18" // configured only by its token_sha256
	secWrongToken  = "sec-it-wrong-00000000"
	secAdminKeyEnv = "SLUICE_SEC_IT_TRITON_KEY"
	secAdminKey    = "sec-it-triton-admin-42"
	secService     = "sec-eta"
	secCheckoutID  = "spiffe://test/checkout"
)

// secCred is a credential a call presents: a bearer token, or none.
type secCred struct {
	name  string
	token string // "" sends no credential
}

var (
	secNone   = secCred{name: "none"}
	secWrong  = secCred{name: "wrong", token: secWrongToken}
	secViewer = secCred{name: "read", token: secViewerToken}
	secOps    = secCred{name: "operate", token: secOpsToken}
	secCreds  = []secCred{secNone, secWrong, secViewer, secOps}
)

// header is the call's credential header ("Authorization: Bearer").
func (c secCred) header(requestID string) map[string]string {
	h := map[string]string{"X-Request-Id": requestID}
	if c.token != "" {
		h["Authorization"] = "Bearer " + c.token
	}
	return h
}

// grpcContext is ctx with the credential and request id as metadata.
func (c secCred) grpcContext(ctx context.Context, requestID string) context.Context {
	kv := []string{"x-request-id", requestID}
	if c.token != "" {
		kv = append(kv, "authorization", "Bearer "+c.token)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// secDenial is what a refused credential gets: status, reason and the gRPC
// code.
type secDenial struct {
	status int
	reason string
	code   codes.Code
}

// secExpect is the refusal each credential gets on an operate endpoint;
// the operate token has none.
var secExpect = map[string]secDenial{
	secNone.name:   {http.StatusUnauthorized, authz.ReasonMissingCredential, codes.Unauthenticated},
	secWrong.name:  {http.StatusUnauthorized, authz.ReasonInvalidCredential, codes.Unauthenticated},
	secViewer.name: {http.StatusForbidden, authz.ReasonInsufficientRole, codes.PermissionDenied},
}

// secSend sends one request with client.
func secSend(ctx context.Context, client *http.Client, method, url string, body []byte, hdr map[string]string) (gwResult, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return gwResult{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return gwResult{}, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return gwResult{code: resp.StatusCode, hdr: resp.Header, body: b.Bytes()}, err
}

// secCheckDenied checks a refusal: its status, a JSON body {"error",
// "reason"} with the reason, and a Bearer challenge on a 401.
func secCheckDenied(t *testing.T, what string, res gwResult, want secDenial) {
	t.Helper()
	if res.code != want.status {
		t.Fatalf("%s: status %d, want %d; body %s", what, res.code, want.status, res.body)
	}
	var e errorBody
	if err := json.Unmarshal(res.body, &e); err != nil || e.Error == "" || e.Reason != want.reason {
		t.Fatalf("%s: body %s, want {\"error\": ..., \"reason\": %q}", what, res.body, want.reason)
	}
	if want.status == http.StatusUnauthorized && !strings.HasPrefix(res.hdr.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("%s: 401 without a Bearer challenge (WWW-Authenticate %q)", what, res.hdr.Get("WWW-Authenticate"))
	}
}

// secCheckGRPCDenied checks a refused gRPC call's code and ErrorInfo
// reason.
func secCheckGRPCDenied(t *testing.T, what string, err error, code codes.Code, reason string) {
	t.Helper()
	st := status.Convert(err)
	if err == nil || st.Code() != code {
		t.Fatalf("%s: %v, want code %v", what, err, code)
	}
	got := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			got = info.GetReason()
		}
	}
	if got != reason {
		t.Fatalf("%s: ErrorInfo reason %q, want %q (%v)", what, got, reason, err)
	}
}

// secAudit is one audit line.
type secAudit struct {
	Audit      bool   `json:"audit"`
	Component  string `json:"component"`
	Action     string `json:"action"`
	Target     string `json:"target"`
	Who        string `json:"who"`
	Via        string `json:"via"`
	SourceAddr string `json:"source_addr"`
	Status     int    `json:"status"`
	Result     string `json:"result"`
	Reason     string `json:"reason"`
	RequestID  string `json:"request_id"`
	GRPCCode   string `json:"grpc_code"`
}

// secAudits decodes the audit lines ("audit":true) among a process's
// output lines.
func secAudits(logs string) []secAudit {
	var out []secAudit
	for line := range strings.SplitSeq(logs, "\n") {
		if !strings.Contains(line, `"audit":true`) {
			continue
		}
		var a secAudit
		if json.Unmarshal([]byte(line), &a) == nil && a.Audit {
			out = append(out, a)
		}
	}
	return out
}

// secListener is one entry of the ready line's "listeners".
type secListener struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	TLS     string `json:"tls"`
	Auth    string `json:"auth"`
}

// secReadyListeners waits for the JSON log line with message msg ("sluice
// ready", "feature server ready") and returns its listeners by name.
func secReadyListeners(t *testing.T, logs func() string, msg string) map[string]secListener {
	t.Helper()
	var out map[string]secListener
	harness.WaitFor(t, 30*time.Second, 50*time.Millisecond, fmt.Sprintf("a %q log line", msg), func() (bool, string) {
		for line := range strings.SplitSeq(logs(), "\n") {
			var l struct {
				Msg       string        `json:"msg"`
				Listeners []secListener `json:"listeners"`
			}
			if json.Unmarshal([]byte(line), &l) != nil || l.Msg != msg {
				continue
			}
			out = map[string]secListener{}
			for _, x := range l.Listeners {
				if _, dup := out[x.Name]; dup {
					t.Fatalf("listener %s twice in %q", x.Name, line)
				}
				out[x.Name] = x
			}
			return true, ""
		}
		return false, "logs:\n" + logs()
	})
	return out
}

// secLoopback reports whether a bound address is on loopback.
func secLoopback(t *testing.T, addr string) bool {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatalf("bound address %q: %v", addr, err)
	}
	return ap.Addr().IsLoopback()
}

// secWaitFor polls cond every 50ms until it holds or d passes.
func secWaitFor(t *testing.T, d time.Duration, what string, cond func() bool, logs func() string) {
	t.Helper()
	harness.WaitFor(t, d, 50*time.Millisecond, what, func() (bool, string) { return cond(), "logs:\n" + logs() })
}

// secRoutePush is a /push body with one route_push row for route id.
func secRoutePush(id int) []byte {
	row := map[string][]any{"route_id": {id}, "event_timestamp": {time.Now().UTC().Format(time.RFC3339Nano)}}
	for i, s := range []string{"distance_km", "avg_speed_kmh", "traffic_index", "stops", "hour_sin", "hour_cos", "weekday_sin", "weekday_cos"} {
		row[s] = []any{float64(id*10 + i)}
	}
	row["embedding"] = []any{make([]float64, 24)}
	b, _ := json.Marshal(map[string]any{"push_source_name": "route_push", "df": row, "to": "online"})
	return b
}

// secMaterialize is a /materialize (start set) or
// /materialize-incremental body over the last hour of route_features.
func secMaterialize(withStart bool) []byte {
	now := time.Now().UTC()
	req := map[string]any{"end_ts": now.Format(time.RFC3339), "feature_views": []string{"route_features"}}
	if withStart {
		req["start_ts"] = now.Add(-time.Hour).Format(time.RFC3339)
	}
	b, _ := json.Marshal(req)
	return b
}

// secGateway is a gateway section with one API client (no anonymous
// access) and one service on parcel_eta version 1, to which extra keys
// are added.
func secGateway(t *testing.T, extra map[string]any) map[string]any {
	t.Helper()
	svc := gwService(gwExample(t), secService, nil, gwRoute("default", nil, "", 100, 0))
	gw := map[string]any{
		"drain_period": "1s",
		"access_log":   "off",
		"clients":      []any{map[string]any{"id": "it-main", "api_key": "${" + gwMainKeyEnv + "}"}},
		"anonymous":    map[string]any{"allowed": false},
		"services":     []any{svc},
	}
	maps.Copy(gw, extra)
	return gw
}

// TestSecurityTokens runs one chain with operator tokens and drives every
// state-changing endpoint of every listener with each credential.
func TestSecurityTokens(t *testing.T) {
	t.Parallel()
	gw := secGateway(t, nil)
	gw["services"].([]any)[0].(map[string]any)["rollout"] = map[string]any{
		"stable":    map[string]any{"version": "1"},
		"candidate": map[string]any{"version": "2"},
		"stages":    []any{map[string]any{"name": "all", "traffic_percent": 10, "min_duration": "1h"}},
		"interval":  "1h",
	}
	c := gwStartWith(t, "examples/models", "parcel_eta", gwFeatureRepo(t, ""), gw, gwOptions{
		env:      append([]string{secOpsTokenEnv + "=" + secOpsToken}, gwKeyEnv...),
		jsonLogs: true,
		mutate: func(cfg map[string]any) {
			cfg["security"] = map[string]any{"tokens": []any{
				map[string]any{"id": "ops", "token": "${" + secOpsTokenEnv + "}", "role": "operate"},
				map[string]any{"id": "viewer", "token_sha256": authz.HashToken(secViewerToken), "role": "read"},
			}}
			cfg["feature_server"].(map[string]any)["read_auth"] = "token"
		},
	})
	admin, models, features := "http://"+c.admin, "http://"+c.models, "http://"+c.features

	t.Run("listeners need tokens", func(t *testing.T) {
		ls := secReadyListeners(t, c.logs.String, "sluice ready")
		for name, want := range map[string]string{
			"admin":       "reads open; writes need an operate token",
			"models_http": "reads open; writes need an operate token",
			"models_grpc": "reads open; writes need an operate token",
			"features":    "token (read / operate)",
		} {
			if l, ok := ls[name]; !ok || l.Auth != want || !secLoopback(t, l.Address) {
				t.Errorf("listener %s = %+v, want auth %q on loopback (all: %+v)", name, l, want, ls)
			}
		}
	})

	// simpleReady reports whether model simple is ready; routeDistance is
	// route 7's distance_km as the feature server reads it.
	simpleReady := func() bool {
		res, err := c.get(t.Context(), models+"/v2/models/simple/ready")
		return err == nil && res.code == http.StatusOK
	}
	routeDistance := func() float64 {
		b := []byte(`{"features": ["route_features:distance_km"], "entities": {"route_id": [7]}}`)
		res, err := secSend(t.Context(), c.client, http.MethodPost, features+"/get-online-features", b, secViewer.header("sec-read"))
		if err != nil || res.code != http.StatusOK {
			t.Fatalf("read route 7: %v %d %s", err, res.code, res.body)
		}
		var rows gwFeatureRows
		if err := json.Unmarshal(res.body, &rows); err != nil || len(rows.Results) < 2 || len(rows.Results[1].Values) != 1 {
			t.Fatalf("read route 7: %v %s", err, res.body)
		}
		v, _ := rows.Results[1].Values[0].(float64)
		return v
	}

	// Every state-changing HTTP endpoint, in an order where each operate
	// call is valid: load before unload, pause before resume.
	type call struct {
		listener, method, base, path string
		body                         func() []byte
		action, target               string
		// done, when not nil, reports whether the call's effect is there:
		// false after the refused calls, true after the operate token's.
		done func() bool
	}
	rollout := func(action string) call {
		return call{
			listener: "admin", method: http.MethodPost, base: admin, path: "/rollout/" + secService + "/" + action,
			action: "rollout." + action, target: secService,
		}
	}
	calls := []call{
		{listener: "admin", method: http.MethodPost, base: admin, path: "/reload", action: "reload"},
		rollout("pause"), rollout("resume"), rollout("promote"), rollout("rollback"), rollout("reset"),
		{listener: "admin", method: http.MethodGet, base: admin, path: "/debug/pprof/", action: "pprof"},
		{
			listener: "models_http", method: http.MethodPost, base: models, path: "/v2/repository/models/simple/load",
			action: "repository.load", target: "simple", done: simpleReady,
		},
		{
			listener: "models_http", method: http.MethodPost, base: models, path: "/v2/repository/models/simple/unload",
			action: "repository.unload", target: "simple", done: func() bool { return !simpleReady() },
		},
		{
			listener: "features", method: http.MethodPost, base: features, path: "/push", action: "push",
			body: func() []byte { return secRoutePush(7) }, done: func() bool { return routeDistance() == 70 },
		},
		{
			listener: "features", method: http.MethodPost, base: features, path: "/materialize", action: "materialize",
			body: func() []byte { return secMaterialize(true) },
		},
		{
			listener: "features", method: http.MethodPost, base: features, path: "/materialize-incremental", action: "materialize_incremental",
			body: func() []byte { return secMaterialize(false) },
		},
	}
	// want is the audit line each call must leave, by request id.
	want := map[string]secAudit{}
	for _, cl := range calls {
		t.Run(cl.listener+" "+cl.method+" "+cl.path, func(t *testing.T) {
			for _, cred := range secCreds {
				if cred == secOps && cl.done != nil && cl.done() {
					t.Fatalf("%s %s: done before the operate token's call", cl.method, cl.path)
				}
				id := fmt.Sprintf("sec-%s-%s-%s", cl.listener, strings.NewReplacer("/", "_").Replace(cl.path), cred.name)
				var body []byte
				if cl.body != nil {
					body = cl.body()
				}
				res, err := secSend(t.Context(), c.client, cl.method, cl.base+cl.path, body, cred.header(id))
				if err != nil {
					t.Fatalf("%s %s with %s credential: %v", cl.method, cl.path, cred.name, err)
				}
				a := secAudit{Component: cl.listener, Action: cl.action, Target: cl.target, Status: res.code, Result: authz.ResultDenied}
				switch cred {
				case secOps:
					if res.code != http.StatusOK {
						t.Fatalf("%s %s with the operate token: %d %s", cl.method, cl.path, res.code, res.body)
					}
					if cl.done != nil && !cl.done() {
						t.Fatalf("%s %s with the operate token: answered 200 but not done", cl.method, cl.path)
					}
					a.Who, a.Via, a.Result = "ops", authz.ViaToken, authz.ResultOK
				default:
					d := secExpect[cred.name]
					secCheckDenied(t, fmt.Sprintf("%s %s with %s credential", cl.method, cl.path, cred.name), res, d)
					a.Reason = d.reason
					if cred == secViewer {
						a.Who, a.Via = "viewer", authz.ViaToken
					}
				}
				want[id] = a
			}
		})
	}

	t.Run("models_grpc repository load and unload", func(t *testing.T) {
		client := inferencepb.NewGRPCInferenceServiceClient(dialGRPC(t, c.modelsGRPC))
		for _, m := range []struct {
			method, action string
			call           func(context.Context) error
			done           func() bool
		}{
			{"RepositoryModelLoad", "repository.load", func(ctx context.Context) error {
				_, err := client.RepositoryModelLoad(ctx, &inferencepb.RepositoryModelLoadRequest{ModelName: "simple"})
				return err
			}, simpleReady},
			{"RepositoryModelUnload", "repository.unload", func(ctx context.Context) error {
				_, err := client.RepositoryModelUnload(ctx, &inferencepb.RepositoryModelUnloadRequest{ModelName: "simple"})
				return err
			}, func() bool { return !simpleReady() }},
		} {
			for _, cred := range secCreds {
				if cred == secOps && m.done() {
					t.Fatalf("%s: done before the operate token's call", m.method)
				}
				id := "sec-grpc-" + m.method + "-" + cred.name
				ctx, cancel := context.WithTimeout(cred.grpcContext(t.Context(), id), 30*time.Second)
				err := m.call(ctx)
				cancel()
				a := secAudit{Component: "models_grpc", Action: m.action, Target: "simple", Result: authz.ResultDenied}
				if cred == secOps {
					if err != nil || !m.done() {
						t.Fatalf("%s with the operate token: %v (done %v)", m.method, err, m.done())
					}
					a.Who, a.Via, a.Result, a.Status, a.GRPCCode = "ops", authz.ViaToken, authz.ResultOK, http.StatusOK, codes.OK.String()
				} else {
					d := secExpect[cred.name]
					secCheckGRPCDenied(t, m.method+" with "+cred.name+" credential", err, d.code, d.reason)
					a.Status, a.Reason, a.GRPCCode = d.status, d.reason, d.code.String()
					if cred == secViewer {
						a.Who, a.Via = "viewer", authz.ViaToken
					}
				}
				want[id] = a
			}
		}
		// Reads stay open (Triton's data plane); a wrong token is still refused.
		if _, err := client.ModelMetadata(t.Context(), &inferencepb.ModelMetadataRequest{Name: "parcel_eta"}); err != nil {
			t.Fatalf("ModelMetadata without a credential: %v", err)
		}
		_, err := client.ModelMetadata(secWrong.grpcContext(t.Context(), "sec-grpc-read-wrong"), &inferencepb.ModelMetadataRequest{Name: "parcel_eta"})
		secCheckGRPCDenied(t, "ModelMetadata with a wrong token", err, codes.Unauthenticated, authz.ReasonInvalidCredential)
	})

	t.Run("x-sluice-token", func(t *testing.T) {
		// The other credential header, and its gRPC metadata twin.
		for _, cred := range []secCred{secViewer, secOps} {
			id := "sec-xtoken-reload-" + cred.name
			res, err := secSend(t.Context(), c.client, http.MethodPost, admin+"/reload", nil, map[string]string{"X-Sluice-Token": cred.token, "X-Request-Id": id})
			if err != nil {
				t.Fatal(err)
			}
			a := secAudit{Component: "admin", Action: "reload", Status: res.code, Via: authz.ViaToken}
			if cred == secOps {
				if res.code != http.StatusOK {
					t.Fatalf("reload with X-Sluice-Token of the operate token: %d %s", res.code, res.body)
				}
				a.Who, a.Result = "ops", authz.ResultOK
			} else {
				secCheckDenied(t, "reload with X-Sluice-Token of the read token", res, secExpect[cred.name])
				a.Who, a.Result, a.Reason = "viewer", authz.ResultDenied, authz.ReasonInsufficientRole
			}
			want[id] = a
		}
		client := inferencepb.NewGRPCInferenceServiceClient(dialGRPC(t, c.modelsGRPC))
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-sluice-token", secViewerToken, "x-request-id", "sec-xtoken-grpc-read")
		_, err := client.RepositoryModelLoad(ctx, &inferencepb.RepositoryModelLoadRequest{ModelName: "simple"})
		secCheckGRPCDenied(t, "RepositoryModelLoad with x-sluice-token of the read token", err, codes.PermissionDenied, authz.ReasonInsufficientRole)
		want["sec-xtoken-grpc-read"] = secAudit{
			Component: "models_grpc", Action: "repository.load", Target: "simple", Who: "viewer", Via: authz.ViaToken,
			Status: http.StatusForbidden, Result: authz.ResultDenied, Reason: authz.ReasonInsufficientRole, GRPCCode: codes.PermissionDenied.String(),
		}
	})

	t.Run("reads", func(t *testing.T) {
		read := []byte(`{"features": ["route_features:distance_km"], "entities": {"route_id": [1, 2]}}`)
		for _, r := range []struct {
			method, url string
			body        []byte
			none        int // the status without a credential
		}{
			{http.MethodGet, admin + "/config_dump", nil, http.StatusOK}, // loopback admin: reads open
			{http.MethodGet, admin + "/rollout", nil, http.StatusOK},
			{http.MethodGet, admin + "/metrics", nil, http.StatusOK},
			{http.MethodGet, models + "/v2/models/parcel_eta", nil, http.StatusOK},              // Triton's data plane is open
			{http.MethodPost, features + "/get-online-features", read, http.StatusUnauthorized}, // read_auth: token
		} {
			for _, cred := range secCreds {
				res, err := secSend(t.Context(), c.client, r.method, r.url, r.body, cred.header("sec-read"))
				if err != nil {
					t.Fatalf("%s %s: %v", r.method, r.url, err)
				}
				wantCode := http.StatusOK
				switch cred {
				case secNone:
					wantCode = r.none
				case secWrong:
					wantCode = http.StatusUnauthorized
				}
				if res.code != wantCode {
					t.Fatalf("%s %s with %s credential: %d %s, want %d", r.method, r.url, cred.name, res.code, res.body, wantCode)
				}
				if bytes.Contains(res.body, []byte(secOpsToken)) || bytes.Contains(res.body, []byte(authz.HashToken(secViewerToken))) ||
					bytes.Contains(res.body, []byte(authz.HashToken(secOpsToken))) {
					t.Fatalf("%s %s shows a token or its hash: %s", r.method, r.url, res.body)
				}
			}
		}
	})

	t.Run("audit log and metric", func(t *testing.T) {
		// The handler's answer can reach the client before its audit line
		// is written; wait for every line, then compare.
		byID := map[string][]secAudit{}
		secWaitFor(t, 10*time.Second, "an audit line for every call", func() bool {
			byID = map[string][]secAudit{}
			for _, a := range secAudits(c.logs.String()) {
				byID[a.RequestID] = append(byID[a.RequestID], a)
			}
			for id := range want {
				if len(byID[id]) == 0 {
					return false
				}
			}
			return true
		}, c.tail)
		for id, w := range want {
			got := byID[id]
			if len(got) != 1 {
				t.Errorf("request %s: %d audit lines, want 1: %+v", id, len(got), got)
				continue
			}
			g := got[0]
			if g.SourceAddr == "" || !secLoopback(t, g.SourceAddr) {
				t.Errorf("request %s: source_addr %q, want the caller's loopback address", id, g.SourceAddr)
			}
			g.SourceAddr, g.RequestID, g.Audit = "", "", false
			if g != w {
				t.Errorf("request %s: audit line %+v, want %+v", id, g, w)
			}
		}
		if ids := slices.Sorted(func(yield func(string) bool) {
			for id := range byID {
				if _, ok := want[id]; !ok && !yield(id) {
					return
				}
			}
		}); len(ids) > 0 {
			t.Errorf("audit lines for calls that change nothing (reads, health): %v", ids)
		}

		res, err := c.get(t.Context(), admin+"/metrics")
		if err != nil || res.code != http.StatusOK {
			t.Fatalf("GET admin /metrics: %v %d", err, res.code)
		}
		counts := map[[3]string]float64{}
		for _, a := range secAudits(c.logs.String()) {
			counts[[3]string{a.Component, a.Action, a.Result}]++
		}
		for k, n := range counts {
			got := monSum(string(res.body), "sluice_audit_events_total", `component="`+k[0]+`"`, `action="`+k[1]+`"`, `result="`+k[2]+`"`)
			if got != n {
				t.Errorf("sluice_audit_events_total{component=%q,action=%q,result=%q} = %v, want %v (the audit lines)", k[0], k[1], k[2], got, n)
			}
		}
		if counts[[3]string{"admin", "rollout.pause", authz.ResultDenied}] != 3 || counts[[3]string{"admin", "rollout.pause", authz.ResultOK}] != 1 {
			t.Errorf("rollout.pause audit counts %v, want 3 denied and 1 ok", counts)
		}
	})
}

// secPKI is the TLS material of TestSecurityTLS: a CA for every listener
// and client, and another CA nothing trusts.
type secPKI struct {
	ca, other *tlstest.CA
	dir       string
	caFile    string
	files     map[string][2]string // tls block name → cert_file, key_file
}

func newSecPKI(t *testing.T) *secPKI {
	t.Helper()
	p := &secPKI{ca: tlstest.NewCA(t), other: tlstest.NewCA(t), dir: t.TempDir(), files: map[string][2]string{}}
	p.caFile = p.ca.WriteCAFile(t, p.dir, "clients-ca")
	for _, name := range []string{"gateway", "admin", "models", "features"} {
		cert, key := p.ca.WriteFiles(t, p.dir, name)
		p.files[name] = [2]string{cert, key}
	}
	return p
}

// block is a listener's tls: block.
func (p *secPKI) block(name string) map[string]any {
	f := p.files[name]
	return map[string]any{"cert_file": f[0], "key_file": f[1]}
}

// trust is a client configuration trusting the CA, with no certificate.
func (p *secPKI) trust() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p.ca.Pool()}
}

// secClient is an HTTP client over cfg, closed when the test ends.
func secClient(t *testing.T, cfg *tls.Config) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: cfg}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// secHandshake completes a TLS handshake with addr and returns the serial
// of the certificate the server presented.
func secHandshake(addr string, cfg *tls.Config) (*big.Int, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg.Clone()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// secSerial is the serial of a PEM certificate.
func secSerial(t *testing.T, certPEM []byte) *big.Int {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM block in the issued certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

// secDialTLS is a gRPC connection to addr over TLS with cfg.
func secDialTLS(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestSecurityTLS serves every listener of one chain over TLS (mTLS on the
// gateway, Triton's restricted APIs on the model server) and swaps the
// gateway's certificate on disk.
func TestSecurityTLS(t *testing.T) {
	t.Parallel()
	pki := newSecPKI(t)
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	gwTLS := pki.block("gateway")
	gwTLS["client_ca_file"], gwTLS["client_auth"] = pki.caFile, "require"
	gw := secGateway(t, map[string]any{
		"grpc":         grpcAddr,
		"tls":          gwTLS,
		"admin_tls":    pki.block("admin"),
		"access_log":   "stdout",
		"log_sampling": map[string]any{"success_percent": 100, "errors_percent": 100},
	})
	gw["clients"] = append(gw["clients"].([]any), map[string]any{"id": "checkout", "tls_identity": secCheckoutID})
	restrict := []string{"model-repository:admin-key=${" + secAdminKeyEnv + "}"}
	checkout := pki.ca.ClientConfig(t, "checkout", secCheckoutID)
	c := gwStartWith(t, "examples/models", "parcel_eta", gwFeatureRepo(t, ""), gw, gwOptions{
		env:       append([]string{secAdminKeyEnv + "=" + secAdminKey}, gwKeyEnv...),
		jsonLogs:  true,
		clientTLS: checkout, // the readiness poll and c's helpers are the checkout client
		mutate: func(cfg map[string]any) {
			ms := cfg["model_server"].(map[string]any)
			ms["tls"] = pki.block("models")
			ms["http_restricted_api"], ms["grpc_restricted_protocol"] = restrict, restrict
			cfg["feature_server"].(map[string]any)["tls"] = pki.block("features")
		},
	})
	ids := c.presentIDs(t)
	body := gwBody(gwPrefer(ids.users, 7), gwPrefer(ids.packages, 62), gwPrefer(ids.routes, 29), 35, 0.4)
	predictPath := "/v1/services/" + secService + ":predict"
	bodyJSON, _ := json.Marshal(body)
	fields, err := structpb.NewStruct(body)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("listeners report tls", func(t *testing.T) {
		ls := secReadyListeners(t, c.logs.String, "sluice ready")
		for _, name := range []string{"models_http", "models_grpc", "models_metrics", "features", "gateway", "admin", "gateway_grpc"} {
			want := "tls"
			if name == "gateway" || name == "gateway_grpc" {
				want = "mtls (client cert required)"
			}
			if ls[name].TLS != want {
				t.Errorf("listener %s: tls %q, want %q (all: %+v)", name, ls[name].TLS, want, ls)
			}
		}
	})

	// Each listener: a handshake trusting the CA completes and a request
	// is answered; a client trusting another CA fails the handshake; a
	// plain-text client gets no answer from the API.
	withCert := func(cfg *tls.Config) *tls.Config {
		out := pki.trust()
		out.Certificates = cfg.Certificates
		return out
	}
	inferClient := func(cfg *tls.Config, addr string) inferencepb.GRPCInferenceServiceClient {
		return inferencepb.NewGRPCInferenceServiceClient(secDialTLS(t, addr, cfg))
	}
	for _, l := range []struct {
		name, addr string
		mtls       bool
		grpc       bool
		request    func(t *testing.T, cfg *tls.Config) error // one request over TLS with cfg
	}{
		{"gateway", c.listen, true, false, func(t *testing.T, cfg *tls.Config) error {
			t.Helper()
			res, err := secSend(t.Context(), secClient(t, cfg), http.MethodPost, "https://"+c.listen+predictPath, bodyJSON, nil)
			if err == nil && res.code != http.StatusOK {
				err = fmt.Errorf("status %d: %s", res.code, res.body)
			}
			return err
		}},
		{"gateway_grpc", grpcAddr, true, true, func(t *testing.T, cfg *tls.Config) error {
			t.Helper()
			_, err := gatewaypb.NewGatewayClient(secDialTLS(t, grpcAddr, cfg)).Predict(t.Context(), &gatewaypb.PredictRequest{Service: secService, Fields: fields})
			return err
		}},
		{"admin", c.admin, false, false, func(t *testing.T, cfg *tls.Config) error {
			t.Helper()
			res, err := secSend(t.Context(), secClient(t, cfg), http.MethodGet, "https://"+c.admin+"/config_dump", nil, nil)
			if err == nil && res.code != http.StatusOK {
				err = fmt.Errorf("status %d: %s", res.code, res.body)
			}
			return err
		}},
		{"models_http", c.models, false, false, func(t *testing.T, cfg *tls.Config) error {
			t.Helper()
			res, err := secSend(t.Context(), secClient(t, cfg), http.MethodGet, "https://"+c.models+"/v2/models/parcel_eta", nil, nil)
			if err == nil && res.code != http.StatusOK {
				err = fmt.Errorf("status %d: %s", res.code, res.body)
			}
			return err
		}},
		{"models_grpc", c.modelsGRPC, false, true, func(t *testing.T, cfg *tls.Config) error {
			t.Helper()
			resp, err := inferClient(cfg, c.modelsGRPC).ServerLive(t.Context(), &inferencepb.ServerLiveRequest{})
			if err == nil && !resp.GetLive() {
				err = errors.New("not live")
			}
			return err
		}},
		{"models_metrics", c.modelsMetrics, false, false, func(t *testing.T, cfg *tls.Config) error {
			t.Helper()
			res, err := secSend(t.Context(), secClient(t, cfg), http.MethodGet, "https://"+c.modelsMetrics+"/metrics", nil, nil)
			if err == nil && (res.code != http.StatusOK || !bytes.Contains(res.body, []byte("sluice_"))) {
				err = fmt.Errorf("status %d: %.200s", res.code, res.body)
			}
			return err
		}},
		{"features", c.features, false, false, func(t *testing.T, cfg *tls.Config) error {
			t.Helper()
			res, err := secSend(t.Context(), secClient(t, cfg), http.MethodGet, "https://"+c.features+"/health", nil, nil)
			if err == nil && res.code != http.StatusOK {
				err = fmt.Errorf("status %d: %s", res.code, res.body)
			}
			return err
		}},
	} {
		t.Run("tls "+l.name, func(t *testing.T) {
			good := pki.trust()
			if l.mtls {
				good = withCert(checkout)
			}
			if _, err := secHandshake(l.addr, good); err != nil {
				t.Fatalf("handshake trusting the CA: %v", err)
			}
			if err := l.request(t, good); err != nil {
				t.Fatalf("request trusting the CA: %v", err)
			}
			bad := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pki.other.Pool(), Certificates: good.Certificates}
			_, err := secHandshake(l.addr, bad)
			if ua, ok := errors.AsType[x509.UnknownAuthorityError](err); !ok {
				t.Fatalf("handshake trusting another CA: %v, want an unknown authority error", err)
			} else if ua.Cert == nil {
				t.Fatalf("handshake trusting another CA: %v names no certificate", err)
			}
			if err := l.request(t, bad); err == nil {
				t.Fatal("a request trusting another CA was answered")
			}
			if l.grpc {
				conn := dialGRPC(t, l.addr)
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				_, err := inferencepb.NewGRPCInferenceServiceClient(conn).ServerLive(ctx, &inferencepb.ServerLiveRequest{})
				if err == nil {
					t.Fatal("a plain-text gRPC call was answered")
				}
				return
			}
			// Go's TLS server answers a plain HTTP request with a canned 400
			// "Client sent an HTTP request to an HTTPS server" and closes:
			// nothing from the API.
			res, err := secSend(t.Context(), &http.Client{Timeout: 10 * time.Second}, http.MethodGet, "http://"+l.addr+"/", nil, nil)
			if err == nil && (res.code != http.StatusBadRequest || !bytes.Contains(res.body, []byte("HTTPS server"))) {
				t.Fatalf("a plain HTTP request was answered %d: %s", res.code, res.body)
			}
		})
	}

	t.Run("mtls identity", func(t *testing.T) {
		predict := func(cfg *tls.Config, hdr map[string]string) (gwResult, error) {
			return secSend(t.Context(), secClient(t, cfg), http.MethodPost, "https://"+c.listen+predictPath, bodyJSON, hdr)
		}
		// No certificate: client_auth require refuses the handshake (over
		// TLS 1.3 the client learns it at its first read).
		if res, err := predict(pki.trust(), gwAuth); err == nil {
			t.Fatalf("a client without a certificate was answered %d: %s", res.code, res.body)
		} else if !strings.Contains(err.Error(), "certificate required") {
			t.Logf("no certificate: %v", err) // the alert's wording is the TLS version's
		}
		// A certificate from a CA the gateway does not trust.
		foreign := pki.trust()
		foreign.Certificates = pki.other.ClientConfig(t, "checkout", secCheckoutID).Certificates
		if res, err := predict(foreign, gwAuth); err == nil {
			t.Fatalf("a client with another CA's certificate was answered %d: %s", res.code, res.body)
		}
		// The checkout certificate is client checkout, without an API key.
		res, err := predict(checkout, map[string]string{"X-Request-Id": "sec-mtls-checkout"})
		if err != nil || res.code != http.StatusOK {
			t.Fatalf("checkout's certificate without a key: %v %d %s", err, res.code, res.body)
		}
		// gRPC reads the same certificate.
		if _, err := gatewaypb.NewGatewayClient(secDialTLS(t, grpcAddr, checkout)).Predict(t.Context(), &gatewaypb.PredictRequest{Service: secService, Fields: fields}); err != nil {
			t.Fatalf("gRPC Predict with checkout's certificate: %v", err)
		}
		// Certificate of checkout, key of it-main: refused.
		res, err = predict(checkout, gwAuth)
		if err != nil {
			t.Fatal(err)
		}
		secCheckDenied(t, "checkout's certificate with it-main's key", res, secDenial{status: http.StatusUnauthorized, reason: "credential_mismatch"})
		// A certificate the CA issued to nobody configured identifies
		// nobody: the API key decides.
		stranger := pki.ca.ClientConfig(t, "stranger", "spiffe://test/stranger")
		if res, err = predict(stranger, nil); err != nil {
			t.Fatal(err)
		}
		secCheckDenied(t, "an unmapped certificate without a key", res, secDenial{status: http.StatusUnauthorized, reason: "missing_api_key"})
		if res, err = predict(stranger, gwAuth); err != nil || res.code != http.StatusOK {
			t.Fatalf("an unmapped certificate with it-main's key: %v %d %s", err, res.code, res.body)
		}

		metrics := func() string {
			res, err := c.get(t.Context(), c.url(c.admin, "/metrics"))
			if err != nil || res.code != http.StatusOK {
				t.Fatalf("GET admin /metrics: %v %d", err, res.code)
			}
			return string(res.body)
		}
		if n := monSum(metrics(), "sluice_gateway_requests_total", `client_id="checkout"`, `code="200"`, `service="`+secService+`"`); n < 2 {
			t.Errorf("sluice_gateway_requests_total{client_id=\"checkout\",code=\"200\"} = %v, want at least 2 (HTTP and gRPC)", n)
		}
		secWaitFor(t, 10*time.Second, "the access log line of checkout's request", func() bool {
			for line := range strings.SplitSeq(c.logs.String(), "\n") {
				var l struct {
					RequestID string `json:"request_id"`
					ClientID  string `json:"client_id"`
					Status    int    `json:"status"`
				}
				if json.Unmarshal([]byte(line), &l) == nil && l.RequestID == "sec-mtls-checkout" {
					if l.ClientID != "checkout" || l.Status != http.StatusOK {
						t.Fatalf("access log line %s, want client_id checkout and status 200", line)
					}
					return true
				}
			}
			return false
		}, c.tail)
	})

	t.Run("triton restricted api", func(t *testing.T) {
		client := secClient(t, pki.trust())
		load := func(action string, hdr map[string]string) gwResult {
			res, err := secSend(t.Context(), client, http.MethodPost, "https://"+c.models+"/v2/repository/models/simple/"+action, nil, hdr)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		for _, hdr := range []map[string]string{nil, {"admin-key": "not-the-key"}, {"Authorization": "Bearer " + secAdminKey}} {
			res := load("load", hdr)
			if res.code != http.StatusForbidden || !bytes.Contains(res.body, []byte("This API is restricted, expecting header 'admin-key'")) {
				t.Fatalf("load with headers %v: %d %s, want Triton's 403", hdr, res.code, res.body)
			}
			secCheckDenied(t, "load without the restricted header", res, secDenial{status: http.StatusForbidden, reason: authz.ReasonRestrictedAPI})
		}
		for _, action := range []string{"load", "unload"} {
			if res := load(action, map[string]string{"admin-key": secAdminKey}); res.code != http.StatusOK {
				t.Fatalf("%s with the restricted header: %d %s", action, res.code, res.body)
			}
		}
		// Other groups stay open.
		if res, err := secSend(t.Context(), client, http.MethodGet, "https://"+c.models+"/v2/models/parcel_eta", nil, nil); err != nil || res.code != http.StatusOK {
			t.Fatalf("metadata without the header: %v %d %s", err, res.code, res.body)
		}

		g := inferClient(pki.trust(), c.modelsGRPC)
		_, err := g.RepositoryModelLoad(t.Context(), &inferencepb.RepositoryModelLoadRequest{ModelName: "simple"})
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "triton-grpc-protocol-admin-key") {
			t.Fatalf("gRPC load without the metadata: %v, want Triton's UNAVAILABLE naming triton-grpc-protocol-admin-key", err)
		}
		// The HTTP header's name is not the gRPC one.
		_, err = g.RepositoryModelLoad(metadata.AppendToOutgoingContext(t.Context(), "admin-key", secAdminKey), &inferencepb.RepositoryModelLoadRequest{ModelName: "simple"})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("gRPC load with the HTTP header name: %v, want UNAVAILABLE", err)
		}
		ctx := metadata.AppendToOutgoingContext(t.Context(), "triton-grpc-protocol-admin-key", secAdminKey)
		if _, err := g.RepositoryModelLoad(ctx, &inferencepb.RepositoryModelLoadRequest{ModelName: "simple"}); err != nil {
			t.Fatalf("gRPC load with the metadata: %v", err)
		}
		if _, err := g.RepositoryModelUnload(ctx, &inferencepb.RepositoryModelUnloadRequest{ModelName: "simple"}); err != nil {
			t.Fatalf("gRPC unload with the metadata: %v", err)
		}
		if _, err := g.ModelMetadata(t.Context(), &inferencepb.ModelMetadataRequest{Name: "parcel_eta"}); err != nil {
			t.Fatalf("gRPC metadata without the metadata key: %v", err)
		}
		// Config dumps do not show the restriction's value.
		if res, err := c.get(t.Context(), c.url(c.admin, "/config_dump")); err != nil || res.code != http.StatusOK || bytes.Contains(res.body, []byte(secAdminKey)) {
			t.Fatalf("GET admin /config_dump: %v %d, or it shows the restricted-API key", err, res.code)
		}
		// The refusals are audited.
		secWaitFor(t, 10*time.Second, "audit lines of the restricted refusals", func() bool {
			denied := 0
			for _, a := range secAudits(c.logs.String()) {
				if a.Action == "repository.load" && a.Result == authz.ResultDenied && a.Reason == authz.ReasonRestrictedAPI {
					denied++
				}
			}
			return denied >= 5 // 3 over HTTP, 2 over gRPC
		}, c.tail)
	})

	t.Run("certificate reload", func(t *testing.T) {
		good := withCert(checkout)
		pid := c.cmd.Process.Pid
		first, err := secHandshake(c.listen, good)
		if err != nil {
			t.Fatal(err)
		}
		reloads := func(listener, result string) float64 {
			res, err := c.get(t.Context(), c.url(c.admin, "/metrics"))
			if err != nil || res.code != http.StatusOK {
				t.Fatalf("GET admin /metrics: %v %d", err, res.code)
			}
			return monSum(string(res.body), "sluice_tls_reloads_total", `listener="`+listener+`"`, `result="`+result+`"`)
		}
		serves := func(want *big.Int) func() bool {
			return func() bool {
				got, err := secHandshake(c.listen, good)
				return err == nil && got.Cmp(want) == 0
			}
		}
		files := pki.files["gateway"]
		swap := func(certPEM, keyPEM []byte) {
			mustWrite(t, files[0], certPEM)
			mustWrite(t, files[1], keyPEM)
		}

		// Overwritten in place: the files are polled every second.
		certPEM, keyPEM := pki.ca.Issue(t, "gateway")
		next := secSerial(t, certPEM)
		if next.Cmp(first) == 0 {
			t.Fatal("the new certificate has the old serial")
		}
		swap(certPEM, keyPEM)
		secWaitFor(t, 10*time.Second, "the gateway serving the certificate written on disk", serves(next), c.tail)

		// A broken file keeps the last good certificate serving.
		errorsBefore := reloads("gateway", "error")
		mustWrite(t, files[0], []byte("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n"))
		secWaitFor(t, 10*time.Second, "the broken certificate file reported", func() bool { return reloads("gateway", "error") > errorsBefore }, c.tail)
		if got, err := secHandshake(c.listen, good); err != nil || got.Cmp(next) != 0 {
			t.Fatalf("after a broken file: serial %v (%v), want %v", got, err, next)
		}
		swap(certPEM, keyPEM) // the good pair again: nothing changes for the server
		secWaitFor(t, 10*time.Second, "the gateway settled", serves(next), c.tail)

		// SIGHUP reloads every listener's files at once, unchanged ones
		// included: each counts one more successful reload, which the
		// one-second poll never does for unchanged files. The gateway's
		// new files may be seen by the poll first, so for it the serial
		// served is what is checked.
		listeners := []string{"gateway", "admin", "models", "features"}
		before := map[string]float64{}
		for _, l := range listeners {
			before[l] = reloads(l, "success")
		}
		third, thirdKey := pki.ca.Issue(t, "gateway")
		swap(third, thirdKey)
		if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		secWaitFor(t, 10*time.Second, "SIGHUP reloading every listener's certificate", func() bool {
			for _, l := range listeners {
				if l != "gateway" && reloads(l, "success") < before[l]+1 {
					return false
				}
			}
			return true
		}, c.tail)
		secWaitFor(t, 10*time.Second, "the gateway serving the third certificate", serves(secSerial(t, third)), c.tail)
		if !strings.Contains(c.logs.String(), "SIGHUP: reloading") {
			t.Errorf("no SIGHUP log line; logs:\n%s", c.tail())
		}
		// No restart: the process started with the chain is still the one
		// serving.
		select {
		case <-c.done:
			t.Fatalf("sluice (pid %d) exited (%v); logs:\n%s", pid, c.waitErr, c.tail())
		default:
		}
		// Requests still work over the reloaded certificate.
		if res, err := c.predict(t.Context(), secService, body, nil); err != nil || res.code != http.StatusOK {
			t.Fatalf("predict after the reloads: %v %d %s", err, res.code, res.body)
		}
	})
}

// secExampleCopy is examples/parcel-eta/sluice.yaml with its ports, model
// repository and feature repository rewritten; every other byte is the
// example's. The ports map the example's ports to new ones.
func secExampleCopy(t *testing.T, ports map[int]int, featureRepo string) []byte {
	t.Helper()
	text := string(readFile(t, "examples/parcel-eta/sluice.yaml"))
	replace := func(old, repl string) {
		t.Helper()
		if n := strings.Count(text, old); n != 1 {
			t.Fatalf("examples/parcel-eta/sluice.yaml: %q appears %d times, want once (update the test with the example)", old, n)
		}
		text = strings.Replace(text, old, repl, 1)
	}
	replace("model_repository: [../models]", fmt.Sprintf("model_repository: [%q]", filepath.Join(repoDir, "examples/models")))
	replace("  repo: features\n", fmt.Sprintf("  repo: %q\n", featureRepo))
	// The example's ports are ${SLUICE_*:-default}: the copy writes the
	// free ports in their place (the bind addresses stay the example's).
	for _, p := range []struct {
		key, env string
		from     int
	}{{"http_port", "SLUICE_HTTP_PORT", 8000}, {"grpc_port", "SLUICE_GRPC_PORT", 8001}, {"metrics_port", "SLUICE_METRICS_PORT", 8002}, {"  port", "SLUICE_FEATURE_PORT", 6566}} {
		replace(fmt.Sprintf("%s: ${%s:-%d}\n", p.key, p.env, p.from), fmt.Sprintf("%s: %d\n", p.key, ports[p.from]))
	}
	replace(`listen: ":${SLUICE_GATEWAY_PORT:-8080}"`, fmt.Sprintf(`listen: ":%d"`, ports[8080]))
	replace(`admin: "127.0.0.1:${SLUICE_ADMIN_PORT:-9901}"`, fmt.Sprintf(`admin: "127.0.0.1:%d"`, ports[9901]))
	replace(`grpc: ":${SLUICE_GATEWAY_GRPC_PORT:-8081}"`, fmt.Sprintf(`grpc: ":%d"`, ports[8081]))
	return []byte(text)
}

// TestSecurityExampleConfig serves the example configuration with only
// its ports and folders rewritten and asserts from the bound addresses
// that only the gateway faces the network; then checks that a copy whose
// admin port leaves loopback without a token is refused.
func TestSecurityExampleConfig(t *testing.T) {
	t.Parallel()
	ports := map[int]int{}
	for _, p := range []int{8000, 8001, 8002, 6566, 8080, 8081, 9901} {
		ports[p] = freePort(t)
	}
	repo := gwFeatureRepo(t, "")
	text := secExampleCopy(t, ports, repo)
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	mustWrite(t, path, text)

	t.Run("only the gateway beyond loopback", func(t *testing.T) {
		c := &gwChain{
			listen: fmt.Sprintf("127.0.0.1:%d", ports[8080]), admin: fmt.Sprintf("127.0.0.1:%d", ports[9901]),
			features: fmt.Sprintf("127.0.0.1:%d", ports[6566]), models: fmt.Sprintf("127.0.0.1:%d", ports[8000]),
			config: text,
		}
		c.launch(t, path, gwOptions{jsonLogs: true, args: []string{"--backend-config", "onnxruntime,library=" + ortLib}}, 120*time.Second)
		ls := secReadyListeners(t, c.logs.String, "sluice ready")
		want := map[string]bool{ // name → loopback
			"models_http": true, "models_grpc": true, "models_metrics": true, "features": true, "admin": true,
			"gateway": false, "gateway_grpc": false,
		}
		if len(ls) != len(want) {
			t.Errorf("listeners %+v, want exactly %v", ls, want)
		}
		for name, loop := range want {
			l, ok := ls[name]
			if !ok {
				t.Errorf("no listener %s in the ready line: %+v", name, ls)
				continue
			}
			if got := secLoopback(t, l.Address); got != loop {
				t.Errorf("listener %s bound %s: loopback %v, want %v", name, l.Address, got, loop)
			}
		}
		// The banner prints the same table. It goes to stdout and the ready
		// line to stderr: two pipes with no order between them, so wait for it.
		var banner []string
		harness.WaitFor(t, 10*time.Second, 50*time.Millisecond, "the banner listing every listener", func() (bool, string) {
			banner = banner[:0]
			sc := bufio.NewScanner(strings.NewReader(c.logs.String()))
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) >= 3 && (f[2] == "loopback" || f[2] == "network") {
					if l, ok := ls[f[0]]; ok && l.Address == f[1] {
						if (f[2] == "loopback") != want[f[0]] {
							t.Errorf("banner line %q disagrees with the bound address", sc.Text())
						}
						banner = append(banner, f[0])
					}
				}
			}
			return len(banner) >= len(want), fmt.Sprintf("banner lists %v; logs:\n%s", banner, c.tail())
		})
		if len(banner) != len(want) {
			t.Errorf("banner lists %v, want every listener of %v; logs:\n%s", banner, want, c.tail())
		}
		// The internal listeners answer on loopback with no set-up (the demo).
		if res, err := c.get(t.Context(), "http://"+c.admin+"/config_dump"); err != nil || res.code != http.StatusOK {
			t.Errorf("admin on loopback: %v %d", err, res.code)
		}
	})

	t.Run("tokenless admin beyond loopback refused", func(t *testing.T) {
		bad := bytes.Replace(text, fmt.Appendf(nil, `admin: "127.0.0.1:%d"`, ports[9901]), []byte(`admin: "0.0.0.0:9901"`), 1)
		badPath := filepath.Join(dir, "admin-open.yaml")
		mustWrite(t, badPath, bad)
		for _, args := range [][]string{
			{"config", "check", "-c", badPath},
			{"serve", "-c", badPath, "--backend-config", "onnxruntime,library=" + ortLib},
		} {
			cmd := exec.Command(binPath, args...)
			cmd.Dir = dir
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			err := runBounded(ctx, cmd)
			cancel()
			exit, ok := errors.AsType[*exec.ExitError](err)
			if !ok || exit.ExitCode() == 0 {
				t.Fatalf("sluice %s: %v, want a refusal; output:\n%s", strings.Join(args[:2], " "), err, out.String())
			}
			if want := map[string]int{"config": 1, "serve": 2}[args[0]]; exit.ExitCode() != want {
				t.Errorf("sluice %s: exit code %d, want %d", args[0], exit.ExitCode(), want)
			}
			msg := `gateway.admin: "0.0.0.0:9901" is reachable beyond loopback, but no operate token is configured`
			if !strings.Contains(out.String(), msg) {
				t.Errorf("sluice %s: output lacks %q:\n%s", strings.Join(args[:2], " "), msg, out.String())
			}
		}
	})
}

// runBounded runs cmd, killing it when ctx ends.
func runBounded(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s: %w", cmd.Path, ctx.Err())
	}
}

// TestSecurityStandalone starts the single-component commands on every
// interface without credentials: the feature server refuses writes and
// says so; the model server keeps Triton's open repository API and warns.
func TestSecurityStandalone(t *testing.T) {
	t.Parallel()
	// The operate token from a --security-config file, by its hash.
	secFile := filepath.Join(t.TempDir(), "security.yaml")
	mustWrite(t, secFile, fmt.Appendf(nil, "security:\n  tokens: [{id: ops, token_sha256: %s, role: operate}]\n", authz.HashToken(secOpsToken)))
	repo := gwFeatureRepo(t, "")
	for _, tc := range []struct {
		name  string
		args  []string
		token bool // an operate token is configured: no warning, writes pass with it
	}{
		{name: "no credentials"},
		{name: "security-config", args: []string{"--security-config", secFile}, token: true},
	} {
		t.Run("feature-server "+tc.name, func(t *testing.T) {
			base, logs := startFeatureServerArgs(t, repo, append([]string{"--address", "0.0.0.0"}, tc.args...)...)
			if warned := strings.Contains(logs.String(), "feature writes (/push, /materialize) are refused"); warned == tc.token {
				t.Errorf("startup warning logged %v, want %v; logs:\n%s", warned, !tc.token, logs)
			}
			for _, w := range []struct {
				path string
				body func() []byte
			}{
				{"/push", func() []byte { return secRoutePush(3) }},
				{"/materialize", func() []byte { return secMaterialize(true) }},
				{"/materialize-incremental", func() []byte { return secMaterialize(false) }},
			} {
				code, hdr, b := do(t, http.MethodPost, base+w.path, w.body(), nil)
				secCheckDenied(t, "POST "+w.path, gwResult{code: code, hdr: hdr, body: b}, secDenial{status: http.StatusUnauthorized, reason: authz.ReasonMissingCredential})
				if code, _, b := do(t, http.MethodPost, base+w.path, w.body(), secOps.header("sec-standalone")); tc.token && code != http.StatusOK {
					t.Errorf("POST %s with the operate token: %d %s", w.path, code, b)
				} else if !tc.token && code != http.StatusUnauthorized {
					t.Errorf("POST %s with a token none configured: %d %s, want 401", w.path, code, b)
				}
			}
			// Reads stay open. Nothing was materialized, so the answer is the
			// handler's (503 feature_view_stale) unless a push came first.
			read := []byte(`{"features": ["route_features:distance_km"], "entities": {"route_id": [1]}}`)
			if code, _, b := do(t, http.MethodPost, base+"/get-online-features", read, nil); code == http.StatusUnauthorized || code == http.StatusForbidden {
				t.Errorf("reads stay open: %d %s", code, b)
			}
		})
	}

	t.Run("feature-server tls", func(t *testing.T) {
		// --tls-cert-file serves every listener over TLS, the extra
		// --metrics-port included.
		pki := newSecPKI(t)
		port, metricsPort := freePort(t), freePort(t)
		files := pki.files["features"]
		p := monStart(t, "feature-server", binPath, "feature-server", "--repo", repo, "--address", "127.0.0.1",
			"--port", strconv.Itoa(port), "--metrics-port", strconv.Itoa(metricsPort),
			"--tls-cert-file", files[0], "--tls-key-file", files[1], "--log-format", "json")
		t.Cleanup(func() {
			if strings.Contains(p.logs.String(), "DATA RACE") {
				t.Errorf("race detected in the feature server; %s", p.tail())
			}
		})
		client := secClient(t, pki.trust())
		answers := func(url string) bool {
			res, err := secSend(t.Context(), client, http.MethodGet, url, nil, nil)
			return err == nil && res.code == http.StatusOK
		}
		secWaitFor(t, 30*time.Second, "the feature server over TLS", func() bool {
			return answers(fmt.Sprintf("https://127.0.0.1:%d/health", port))
		}, p.tail)
		metricsAddr := fmt.Sprintf("127.0.0.1:%d", metricsPort)
		if !answers("https://" + metricsAddr + "/metrics") {
			t.Errorf("the metrics port does not answer over TLS; %s", p.tail())
		}
		if res, err := secSend(t.Context(), &http.Client{Timeout: 10 * time.Second}, http.MethodGet, "http://"+metricsAddr+"/metrics", nil, nil); err == nil && res.code == http.StatusOK {
			t.Errorf("the metrics port answers plain HTTP: %.200s", res.body)
		}
		ls := secReadyListeners(t, p.logs.String, "feature server ready")
		for _, name := range []string{"features", "features_metrics"} {
			if ls[name].TLS != "tls" {
				t.Errorf("listener %s: tls %q, want tls (all: %+v)", name, ls[name].TLS, ls)
			}
		}
	})

	const warning = "the model repository API (load/unload) is open to the network without a credential"
	httpRule := []string{"--http-restricted-api", "model-repository:admin-key=" + secAdminKey}
	grpcRule := []string{"--grpc-restricted-protocol", "model-repository:admin-key=" + secAdminKey}
	for _, tc := range []struct {
		name                           string
		httpRestricted, grpcRestricted bool
	}{
		{name: "no credentials"},
		// A restriction on one protocol leaves the other's load open.
		{name: "http restricted only", httpRestricted: true},
		{name: "both restricted", httpRestricted: true, grpcRestricted: true},
	} {
		t.Run("model-server "+tc.name, func(t *testing.T) {
			args := []string{"--model-repository", "examples/models", "--model-control-mode", "explicit", "--load-model", "simple", "--address", "0.0.0.0"}
			if tc.httpRestricted {
				args = append(args, httpRule...)
			}
			if tc.grpcRestricted {
				args = append(args, grpcRule...)
			}
			s := startServerCmd(t, "model-server", args...)
			wantWarn := !tc.httpRestricted || !tc.grpcRestricted
			if got := strings.Contains(s.logs.String(), warning); got != wantWarn {
				t.Errorf("warning logged %v, want %v; logs:\n%s", got, wantWarn, s.logs)
			}
			// Triton's behaviour: what is not restricted is open.
			code, _, b := do(t, http.MethodPost, "http://"+s.http+"/v2/repository/models/simple/load", nil, nil)
			wantCode := http.StatusOK
			if tc.httpRestricted {
				wantCode = http.StatusForbidden
			}
			if code != wantCode {
				t.Errorf("HTTP load without a credential: %d %s, want %d", code, b, wantCode)
			}
			client := inferencepb.NewGRPCInferenceServiceClient(dialGRPC(t, s.grpc))
			_, err := client.RepositoryModelLoad(t.Context(), &inferencepb.RepositoryModelLoadRequest{ModelName: "simple"})
			wantGRPC := codes.OK
			if tc.grpcRestricted {
				wantGRPC = codes.Unavailable
			}
			if status.Code(err) != wantGRPC {
				t.Errorf("gRPC load without a credential: %v, want %v", err, wantGRPC)
			}
		})
	}
}
