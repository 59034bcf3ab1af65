package accuracy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"
)

// Ingester joins outcomes (Joiner.Ingest).
type Ingester interface {
	Ingest(ctx context.Context, outs []Outcome) ([]string, error)
}

// Subscriber takes outcomes from NATS: a message on <prefix>.<service>
// carries that service's outcomes, one object or an array, as POST takes
// them. The subscription is a queue group, so in a fleet each message goes
// to one replica. A message with a reply subject is answered with the
// results ({"results": [...]} or {"error": ..., "reason": ...}). Core NATS
// delivers at most once: a publisher that needs every outcome counted
// uses request/reply and retries (a retried outcome counts once).
type Subscriber struct {
	nc     *nats.Conn
	prefix string
	in     Ingester
	log    *slog.Logger
}

// NewSubscriber builds the subscriber; Run subscribes.
func NewSubscriber(nc *nats.Conn, prefix string, in Ingester, logger *slog.Logger) *Subscriber {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Subscriber{nc: nc, prefix: strings.TrimSuffix(prefix, "."), in: in, log: logger.With("component", "accuracy")}
}

// Run takes outcomes until ctx ends, then drains the subscription.
func (s *Subscriber) Run(ctx context.Context) error {
	sub, err := s.nc.QueueSubscribe(s.prefix+".*", "sluice-accuracy", func(m *nats.Msg) { s.handle(ctx, m) })
	if err != nil {
		return fmt.Errorf("subscribe %s.*: %w", s.prefix, err)
	}
	<-ctx.Done()
	return sub.Drain()
}

func (s *Subscriber) handle(ctx context.Context, m *nats.Msg) {
	service := strings.TrimPrefix(m.Subject, s.prefix+".")
	answer := func(v any) {
		if m.Reply == "" {
			return
		}
		b, err := json.Marshal(v)
		if err == nil {
			_ = m.Respond(b)
		}
	}
	outs, err := ParseOutcomes(service, m.Data)
	if err != nil {
		s.log.Debug("outcome message refused", "subject", m.Subject, "err", err)
		answer(map[string]string{"error": err.Error(), "reason": "invalid_outcome"})
		return
	}
	for i := range outs {
		// The outcome subject is the feedback pipeline's: whoever may
		// publish on the cluster's NATS judges any prediction.
		outs[i].Any = true
	}
	res, err := s.in.Ingest(ctx, outs)
	if err != nil {
		s.log.Warn("outcomes not stored", "subject", m.Subject, "outcomes", len(outs), "err", err)
		answer(map[string]string{"error": "the pending store did not take the outcomes; retry", "reason": "accuracy_store_unavailable"})
		return
	}
	answer(map[string]any{"service": service, "results": res})
}
