package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/cluster"
	"github.com/sluice-ml/sluice/internal/config"
	"github.com/sluice-ml/sluice/internal/gateway"
	"github.com/sluice-ml/sluice/internal/tlsconfig"
)

// openFleet connects to the fleet's shared state when the configuration
// has a cluster section (nil, nil otherwise): a replica that cannot read
// the fleet's state within connect_timeout does not start, because
// starting without it could serve a candidate the fleet rolled back.
func openFleet(ctx context.Context, cc *config.Cluster, logger *slog.Logger, reg prometheus.Registerer) (*gateway.Fleet, *cluster.Cluster, error) {
	if cc == nil {
		return nil, nil, nil
	}
	opts := cluster.Options{
		URL: cc.NATS.URL, Credentials: cc.NATS.Credentials, Name: cc.Name, BucketPrefix: cc.BucketPrefix,
		Replica: cc.Replica, PublishInterval: cc.PublishInterval.Std(), ReplicaTTL: cc.ReplicaTTL.Std(),
		ConnectTimeout: cc.ConnectTimeout.Std(),
	}
	if t := cc.NATS.TLS; t != nil {
		var err error
		if opts.TLS, err = tlsconfig.ClientConfig(*t); err != nil {
			return nil, nil, fmt.Errorf("cluster.nats.tls: %w", err)
		}
		for _, w := range t.Warnings() {
			logger.Warn("cluster nats tls is not safe", "warning", w)
		}
	}
	c := cluster.New(opts, logger, reg)
	if err := c.Connect(ctx); err != nil {
		return nil, nil, err
	}
	f, err := gateway.OpenFleet(ctx, c)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return f, c, nil
}

// closeFleet closes c when a start fails after openFleet.
func closeFleet(c *cluster.Cluster) {
	if c != nil {
		c.Close()
	}
}
