package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/release/record/natstest"
)

// TestServerSurvivesKillAndPause: a stream outlives a kill and restart on
// the same port and store; a paused server answers nothing until resumed.
func TestServerSurvivesKillAndPause(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	connect := func() jetstream.JetStream {
		t.Helper()
		nc, err := nats.Connect(srv.URL(), nats.Timeout(2*time.Second))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		return js
	}
	js := connect()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "NATSTEST", Subjects: []string{"natstest.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "natstest.a", []byte("kept"))
	require.NoError(t, err)

	srv.Kill()
	require.False(t, srv.Running())
	srv.Restart()
	require.True(t, srv.Running())
	js = connect()
	stream, err := js.Stream(ctx, "NATSTEST")
	require.NoError(t, err)
	msg, err := stream.GetLastMsgForSubject(ctx, "natstest.a")
	require.NoError(t, err)
	require.Equal(t, "kept", string(msg.Data))

	srv.Pause()
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = js.Publish(short, "natstest.a", []byte("not answered"))
	cancelShort()
	require.Error(t, err, "a paused server answers nothing")
	srv.Resume()
	_, err = js.Publish(ctx, "natstest.a", []byte("answered"))
	require.NoError(t, err)

	srv.Stop()
	require.False(t, srv.Running())
	srv.Stop() // a stopped server stays stopped
}
