package admission

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/stats"

	"github.com/sluice-ml/sluice/internal/apierr"
)

// Responses are charged like requests: refused for now (overloaded) when
// the budget cannot take them, for good (response_too_large) when it never
// could; a small response may take the reserve, a large one may not.
func TestReserveResponse(t *testing.T) {
	var none *Budget
	require.NoError(t, none.ReserveResponse(1<<40), "no budget: nothing charged")
	none.Release(1 << 40)

	b := NewBudget(16<<20, nil) // 14 MiB for large bodies and answers, 2 MiB reserve
	var ie *apierr.Error
	err := b.ReserveResponse(15 << 20)
	require.True(t, errors.As(err, &ie))
	require.Equal(t, apierr.ReasonResponseTooLarge, ie.Reason)
	require.Zero(t, b.InUse())

	require.NoError(t, b.ReserveResponse(14<<20))
	require.ErrorIs(t, b.ReserveResponse(2<<20), ErrOverloaded, "a large answer may not take the reserve")
	require.NoError(t, b.ReserveResponse(1<<20), "a small one may")
	b.Release(14<<20 + 1<<20)
	require.Zero(t, b.InUse())

	// With an account (gRPC's, see responseAccounts), the charge is held
	// until the call ends; a stream's reservation until its release.
	g := &grpcGate{budget: b, rej: orUnregistered(nil).forListener("t")}
	ctx := responseAccounts{g}.TagRPC(context.Background(), nil)
	require.NoError(t, ChargeResponse(ctx, 4<<20))
	release, err := ReserveStreamResponse(ctx, 4<<20)
	require.NoError(t, err)
	require.Equal(t, int64(8<<20), b.InUse())
	release()
	responseAccounts{g}.HandleRPC(ctx, &stats.End{}) // the call ended
	require.Zero(t, b.InUse())
	err = ChargeResponse(ctx, 15<<20)
	require.True(t, errors.As(err, &ie))
	require.Equal(t, apierr.ReasonResponseTooLarge, ie.Reason)
}
