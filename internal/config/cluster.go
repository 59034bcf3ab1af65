package config

import (
	"net/url"
	"regexp"
	"time"
)

// Cluster makes the processes of one fleet share their state through NATS
// JetStream: the rollouts' state and gate windows, the fallback baselines.
// Without it every process keeps its own state (and local files). Any
// component that needs fleet-wide state reads this one section, so that a
// fleet has one broker connection setting.
type Cluster struct {
	// Name names the fleet: replicas with the same name (and bucket
	// prefix) on one NATS account share state [sluice].
	Name string `yaml:"name"`
	// Replica names this process in the fleet; unique per replica
	// [the host name and the process id].
	Replica string `yaml:"replica"`
	// NATS is the JetStream server.
	NATS ClusterNATS `yaml:"nats"`
	// BucketPrefix starts the name of every KV bucket the fleet uses:
	// <prefix>_<name>_<purpose> [SLUICE].
	BucketPrefix string `yaml:"bucket_prefix"`
	// PublishInterval is how often a replica publishes its gate window
	// counts [250ms].
	PublishInterval Duration `yaml:"publish_interval"`
	// ReplicaTTL is how long another replica's published counts count
	// after it last published them: a replica silent for longer (killed,
	// cut off) drops out of the fleet's sums [5s].
	ReplicaTTL Duration `yaml:"replica_ttl"`
	// ConnectTimeout bounds the first connection at start-up: a replica
	// that cannot read the fleet's state does not start [10s].
	ConnectTimeout Duration `yaml:"connect_timeout"`
}

// ClusterNATS is the cluster's NATS server and credentials.
type ClusterNATS struct {
	// URL is the server (several, comma-separated, for a NATS cluster)
	// [nats://127.0.0.1:4222].
	URL string `yaml:"url"`
	// TLS connects over TLS (mTLS with cert_file); a tls:// URL alone
	// means TLS with the system roots.
	TLS *ClientTLS `yaml:"tls"`
	// Credentials is a NATS credentials file (JWT and NKey seed), relative
	// to the config file.
	Credentials string `yaml:"credentials"`
}

func (c *Cluster) applyDefaults() {
	c.Name = or(c.Name, "sluice")
	c.BucketPrefix = or(c.BucketPrefix, "SLUICE")
	c.NATS.URL = or(c.NATS.URL, "nats://127.0.0.1:4222")
	c.PublishInterval = or(c.PublishInterval, Duration(250*time.Millisecond))
	c.ReplicaTTL = or(c.ReplicaTTL, Duration(5*time.Second))
	c.ConnectTimeout = or(c.ConnectTimeout, Duration(10*time.Second))
}

// clusterToken is what a fleet name, a replica name and a bucket prefix
// may hold: they become parts of JetStream bucket names and keys.
var clusterToken = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (v *validator) cluster(c *Cluster) {
	if !clusterToken.MatchString(c.Name) {
		v.add("cluster.name", "%q: want 1 to 64 letters, digits, '-' or '_'", c.Name)
	}
	if c.Replica != "" && !clusterToken.MatchString(c.Replica) {
		v.add("cluster.replica", "%q: want 1 to 64 letters, digits, '-' or '_'", c.Replica)
	}
	if !clusterToken.MatchString(c.BucketPrefix) {
		v.add("cluster.bucket_prefix", "%q: want 1 to 64 letters, digits, '-' or '_'", c.BucketPrefix)
	}
	for _, s := range splitURLs(c.NATS.URL) {
		u, err := url.Parse(s)
		switch {
		case err != nil:
			v.add("cluster.nats.url", "%q is not a URL", s)
		case u.Scheme != "nats" && u.Scheme != "tls":
			v.add("cluster.nats.url", "%q: scheme must be nats or tls", s)
		case u.Host == "":
			v.add("cluster.nats.url", "%q has no host", s)
		case u.User != nil:
			v.add("cluster.nats.url", "%q carries credentials; use cluster.nats.credentials", u.Redacted())
		}
	}
	v.positive("cluster.publish_interval", c.PublishInterval)
	v.positive("cluster.connect_timeout", c.ConnectTimeout)
	if c.ReplicaTTL < 2*c.PublishInterval {
		v.add("cluster.replica_ttl", "%s must be at least twice publish_interval (%s)", c.ReplicaTTL.Std(), c.PublishInterval.Std())
	}
}

// splitURLs splits a comma-separated server list.
func splitURLs(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			} else {
				out = append(out, "")
			}
			start = i + 1
		}
	}
	return out
}

// MaxFallbackHistory bounds fallback.history: 30 days of hourly windows,
// what a baseline keeps in memory and in its file or KV entry.
const MaxFallbackHistory = 30 * 24
