// Package authz is Sluice's one credential mechanism for every API that
// changes state — the admin port (rollout commands, reload, drain, pprof,
// config dumps), the model server's repository API over HTTP and gRPC, the
// feature server's push and materialize — together with Triton's
// restricted-API rules and the audit log of state-changing calls.
//
// # Credentials and roles
//
// A credential is a bearer token, sent as "Authorization: Bearer <token>"
// (which wins) or "X-Sluice-Token: <token>" (gRPC: metadata "authorization"
// or "x-sluice-token"). Tokens are configured by id, role and the hex
// SHA-256 of the secret (HashToken), like the gateway's API keys: the
// presented secret is hashed, looked up, and the match confirmed with a
// constant-time comparison. Secrets are never stored, logged or echoed. A
// verified mTLS client certificate can stand in for a token: its identity
// (first URI SAN, else DNS SAN, else email SAN, else subject CN) is mapped
// to a role by PolicyOptions.CertRoles. A token wins over a certificate.
//
// Roles are ordered, RoleNone < RoleRead < RoleOperate: read covers dumps,
// status, endpoints, metrics and the read side of the KServe API
// (metadata, inference, model config, statistics, repository index);
// operate covers reload, rollout commands, drain, pprof, repository
// load/unload, shared-memory registration, trace and log settings, push and
// materialize, and implies read. RoleNone is what health probes need:
// nothing.
//
// # Open reads and open writes
//
// A call without a credential passes only when the listener is open for
// the role it needs: OpenReads opens RoleRead calls (a loopback admin
// port; a feature server whose reads are open; a model server whose data
// plane is open, as Triton's is), OpenWrites opens RoleOperate calls too.
// The integrator sets OpenWrites only for a loopback-only listener with no
// token configured (so `make demo` needs no set-up); NewPolicy refuses it
// alongside tokens. Where tokens are configured, a presented credential
// that matches nothing is always refused (401 invalid_credential), even on
// an open listener; a valid credential always gets at least what an
// anonymous call would. Where none are, a bearer credential cannot be
// ours (a proxy's, a KServe client's default header) and is ignored.
//
// Refusals are *DeniedError errors: 401 missing_credential or
// invalid_credential (HTTP answers carry "WWW-Authenticate: Bearer"), 403
// insufficient_role, and restricted_api (below). HTTP bodies are
// {"error": "...", "reason": "..."}; GRPCError maps 401 to Unauthenticated
// and 403 to PermissionDenied, with an ErrorInfo carrying the reason.
//
// # Triton restricted APIs
//
// tritonserver's --http-restricted-api and --grpc-restricted-protocol take
// "<API>[,<API>...]:<key>=<value>" (ParseRestriction): a request to one of
// the listed groups — health, metadata, inference, shared-memory,
// model-config, model-repository, statistics, trace, logging — must carry
// header <key> (gRPC: metadata "triton-grpc-protocol-<key>") with exactly
// <value>, else it is refused before anything else is checked: HTTP 403
// "This API is restricted, expecting header '<key>'", gRPC Unavailable
// "This protocol is restricted, expecting header
// 'triton-grpc-protocol-<key>'", as Triton answers. A group may be in one
// rule only. The restriction is checked in addition to the role:
// KServeHTTPGroup and KServeMethodGroup classify each KServe route and RPC
// into its group and role, and anything they do not know needs RoleOperate,
// so nothing unclassified is open.
//
// # Calls a gateway proxied
//
// The gateway's KServe proxy vouches for the client it authenticated with
// HeaderForwardedClient (SignForwarded: client id and address, HMAC-SHA256
// with PolicyOptions.ForwardedKey, bound to the request id, valid for two
// minutes). A policy with that key verifies it: the call is the client's
// (Principal.Client, ProxyAddr; Addr is the client's address), OpenWrites
// never apply to it, and a header that does not verify is refused (401
// invalid_forwarded_client). Without a key the header is ignored.
//
// # Audit log
//
// Every state-changing call (one needing RoleOperate) is recorded by an
// Auditor, denied ones included, as one JSON line:
//
//	{"time":"2026-01-02T15:04:05.123Z","audit":true,"component":"admin",
//	 "action":"rollout.promote","target":"fraud","who":"ci","via":"token",
//	 "source_addr":"10.0.0.7:51234","status":200,"result":"ok","reason":"",
//	 "request_id":"4f1c…"}
//
// (one line in the file; gRPC calls add "grpc_code", and their status is the
// one an HTTP edge answers for the same error, apierr.CodeHTTPStatus).
// component is admin, models_http, models_grpc or
// features; action is a constant from code; result is ok, denied or error;
// who is the token id, certificate identity or "anonymous". Each line is
// counted in sluice_audit_events_total{component,action,result}.
//
// Policy.Require and Policy.Operate/OperateGroup are the HTTP middleware,
// RequireKServe guards a whole KServe HTTP handler, and
// UnaryInterceptor/StreamInterceptor guard a gRPC server; all put the
// caller in the context, where PrincipalFrom finds it.
package authz
