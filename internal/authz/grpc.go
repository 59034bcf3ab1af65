package authz

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// GRPCError turns a *DeniedError into a gRPC status error carrying an
// errdetails.ErrorInfo with its reason (domain "sluice"): 401 becomes
// Unauthenticated and 403 PermissionDenied, except a restricted API, which
// is Unavailable, as Triton answers it. Any other error, and nil, is
// returned as is.
func GRPCError(err error) error {
	d, ok := errors.AsType[*DeniedError](err)
	if !ok {
		return err
	}
	return apierr.StatusError(deniedCode(d), d.Reason, d.Message)
}

func deniedCode(d *DeniedError) codes.Code {
	switch {
	case d.Reason == ReasonRestrictedAPI:
		return codes.Unavailable
	case d.Status == http.StatusUnauthorized:
		return codes.Unauthenticated
	case d.Status == http.StatusForbidden:
		return codes.PermissionDenied
	default:
		return codes.Internal
	}
}

// UnaryInterceptor authorizes every unary call of a gRPC server: classify
// maps the full method name to its group and role (KServeMethodGroup for
// the model server). A call needing RoleOperate is audited with component
// "models_grpc", denied ones included; audit may be nil. Allowed calls
// find their Principal with PrincipalFrom.
func (p *Policy) UnaryInterceptor(classify func(fullMethod string) (string, Role), audit *Auditor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		group, need := classify(info.FullMethod)
		pr, aerr := p.AuthorizeGRPC(ctx, need, group)
		if need < RoleOperate {
			if aerr != nil {
				return nil, GRPCError(aerr)
			}
			return handler(WithPrincipal(ctx, pr), req)
		}
		ev := grpcEvent(ctx, info.FullMethod, group, pr, grpcTarget(req))
		if aerr != nil {
			err = GRPCError(aerr)
			recordGRPC(audit, ev, err)
			return nil, err
		}
		defer func() {
			if v := recover(); v != nil {
				recordGRPC(audit, ev, status.Error(codes.Internal, "panic"))
				panic(v)
			}
			recordGRPC(audit, ev, err)
		}()
		return handler(WithPrincipal(ctx, pr), req)
	}
}

// StreamInterceptor is UnaryInterceptor for streaming calls; the stream's
// Context carries the Principal.
func (p *Policy) StreamInterceptor(classify func(fullMethod string) (string, Role), audit *Auditor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		ctx := ss.Context()
		group, need := classify(info.FullMethod)
		pr, aerr := p.AuthorizeGRPC(ctx, need, group)
		wrapped := &principalStream{ServerStream: ss, ctx: WithPrincipal(ctx, pr)}
		if need < RoleOperate {
			if aerr != nil {
				return GRPCError(aerr)
			}
			return handler(srv, wrapped)
		}
		ev := grpcEvent(ctx, info.FullMethod, group, pr, "")
		if aerr != nil {
			err = GRPCError(aerr)
			recordGRPC(audit, ev, err)
			return err
		}
		defer func() {
			if v := recover(); v != nil {
				recordGRPC(audit, ev, status.Error(codes.Internal, "panic"))
				panic(v)
			}
			recordGRPC(audit, ev, err)
		}()
		return handler(srv, wrapped)
	}
}

type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *principalStream) Context() context.Context { return s.ctx }

func grpcEvent(ctx context.Context, fullMethod, group string, pr Principal, target string) Event {
	if target == "" && group == "" {
		target = fullMethod // an unclassified call: the method is what it targets
	}
	return Event{
		Component: ComponentModelsGRPC, Action: grpcAction(fullMethod, group), Target: target,
		Who: pr.ID, Via: pr.Via, Addr: pr.Addr, RequestID: firstValue(ctx, "x-request-id"),
	}
}

// recordGRPC completes ev with the call's outcome err and records it.
func recordGRPC(a *Auditor, ev Event, err error) {
	st := status.Convert(err)
	ev.GRPCCode = st.Code().String()
	ev.Reason = apierr.StatusReason(st)
	ev.Status = apierr.CodeHTTPStatus(st.Code(), ev.Reason)
	switch {
	case err == nil:
		ev.Result = ResultOK
	case st.Code() == codes.Unauthenticated || st.Code() == codes.PermissionDenied || ev.Reason == ReasonRestrictedAPI:
		ev.Result = ResultDenied
	default:
		ev.Result = ResultError
	}
	a.Record(ev)
}

// grpcTarget names what a request acts on: its model (or region) name.
func grpcTarget(req any) string {
	switch m := req.(type) {
	case interface{ GetModelName() string }:
		return m.GetModelName()
	case interface{ GetName() string }:
		return m.GetName()
	default:
		return ""
	}
}
