// Package alertmanager_test checks the example Alertmanager configuration
// with Debian's amtool (package prometheus-alertmanager): it loads, routes
// each severity of Sluice's rules to its receivers, renders its templates,
// and holds no secret.
package alertmanager_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-ml/sluice/deploy/prometheus"
)

const configFile = "alertmanager.yml"

// amtool returns the path of amtool, failing the test when it is missing
// (make deps installs Debian's prometheus-alertmanager).
func amtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("amtool")
	if err != nil {
		t.Fatal("amtool not found: install Debian's prometheus-alertmanager package (make deps does, as root)")
	}
	return p
}

func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), bin, args...).Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("amtool %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

func TestCheckConfig(t *testing.T) {
	out := run(t, amtool(t), "check-config", configFile)
	if !strings.Contains(out, "SUCCESS") || !strings.Contains(out, "1 templates") {
		t.Fatalf("amtool check-config: want SUCCESS with the template loaded:\n%s", out)
	}
}

// TestRoutes sends each severity the rules use, and one they do not,
// through the routing tree.
func TestRoutes(t *testing.T) {
	bin := amtool(t)
	want := map[string]string{"page": "sluice-page", "ticket": "sluice-ticket", "": "sluice-default"}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(prometheus.Rules, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if _, ok := want[r.Labels["severity"]]; !ok {
				t.Errorf("alert %s has severity %q, which the configuration does not route", r.Alert, r.Labels["severity"])
			}
		}
	}
	for severity, receiver := range want {
		t.Run("severity="+severity, func(t *testing.T) {
			labels := []string{"alertname=SluiceTest", "service=parcel-eta"}
			if severity != "" {
				labels = append(labels, "severity="+severity)
			}
			args := append([]string{"config", "routes", "test", "--config.file=" + configFile}, labels...)
			if got := strings.TrimSpace(run(t, bin, args...)); got != receiver {
				t.Errorf("%v routes to %q, want %q", labels, got, receiver)
			}
		})
	}
}

// notification is Alertmanager's template data (template.Data).
type notification struct {
	Receiver          string            `json:"receiver"`
	Status            string            `json:"status"`
	Alerts            []alert           `json:"alerts"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
}

type alert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    string            `json:"startsAt"`
	EndsAt      string            `json:"endsAt"`
}

func TestTemplates(t *testing.T) {
	bin := amtool(t)
	page := alert{
		Status: "firing",
		Labels: map[string]string{"alertname": "SluiceFeatureBreakerOpen", "service": "parcel-eta", "severity": "page"},
		Annotations: map[string]string{
			"summary":     "The feature breaker of parcel-eta is open",
			"description": "parcel-eta answers 503 feature_service_unavailable.",
			"runbook_url": "https://example.invalid/operations.md#sluicefeaturebreakeropen",
		},
		StartsAt: "2026-01-02T03:04:05Z", EndsAt: "0001-01-01T00:00:00Z",
	}
	second := page
	second.Labels = map[string]string{"alertname": "SluiceFeatureBreakerOpen", "service": "parcel-eta", "severity": "page", "instance": "b:9901"}
	ticket := alert{
		Status: "resolved",
		Labels: map[string]string{"alertname": "SluiceModelLoadFailed", "model": "digits", "reason": "checksum_mismatch", "severity": "ticket"},
		Annotations: map[string]string{
			"summary":     "Model digits failed to load (checksum_mismatch)",
			"description": "The version that served before keeps serving.",
			"runbook_url": "https://example.invalid/operations.md#sluicemodelloadfailed",
		},
		StartsAt: "2026-01-02T03:04:05Z", EndsAt: "2026-01-02T04:04:05Z",
	}
	tests := []struct {
		name string
		data notification
		want map[string][]string // template -> substrings
	}{
		{
			name: "two firing pages",
			data: notification{
				Receiver: "sluice-page", Status: "firing", Alerts: []alert{page, second},
				GroupLabels:       map[string]string{"alertname": "SluiceFeatureBreakerOpen", "service": "parcel-eta"},
				CommonLabels:      map[string]string{"alertname": "SluiceFeatureBreakerOpen", "service": "parcel-eta", "severity": "page"},
				CommonAnnotations: page.Annotations,
			},
			want: map[string][]string{
				"sluice.title":       {"[FIRING:2] SluiceFeatureBreakerOpen parcel-eta (page)"},
				"sluice.text":        {"The feature breaker of parcel-eta is open\nparcel-eta answers 503", "instance=b:9901", "service=parcel-eta severity=page"},
				"sluice.runbook":     {"https://example.invalid/operations.md#sluicefeaturebreakeropen"},
				"sluice.slack.color": {"danger"},
			},
		},
		{
			name: "a resolved ticket",
			data: notification{
				Receiver: "sluice-ticket", Status: "resolved", Alerts: []alert{ticket},
				GroupLabels:       map[string]string{"alertname": "SluiceModelLoadFailed", "model": "digits"},
				CommonLabels:      ticket.Labels,
				CommonAnnotations: map[string]string{"summary": ticket.Annotations["summary"]},
			},
			want: map[string][]string{
				"sluice.title":       {"[RESOLVED] SluiceModelLoadFailed digits (ticket)"},
				"sluice.text":        {"RESOLVED: Model digits failed to load (checksum_mismatch)", "reason=checksum_mismatch"},
				"sluice.runbook":     {"https://example.invalid/operations.md#sluicemodelloadfailed"},
				"sluice.slack.color": {"good"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			data := filepath.Join(t.TempDir(), "data.json")
			if err := os.WriteFile(data, b, 0o600); err != nil {
				t.Fatal(err)
			}
			for tpl, subs := range tc.want {
				out := run(t, bin, "template", "render", "--template.glob=templates/*.tmpl",
					"--template.data="+data, `--template.text={{ template "`+tpl+`" . }}`)
				for _, s := range subs {
					if !strings.Contains(out, s) {
						t.Errorf("template %s renders %q, want it to contain %q", tpl, out, s)
					}
				}
			}
		})
	}
}

// receiver is the part of a receiver TestNoSecrets reads.
type receiver struct {
	Name      string           `yaml:"name"`
	PagerDuty []map[string]any `yaml:"pagerduty_configs"`
	Slack     []map[string]any `yaml:"slack_configs"`
	Webhook   []map[string]any `yaml:"webhook_configs"`
}

// TestNoSecrets keeps credentials out of the example: PagerDuty keys and
// Slack URLs come from files, webhook URLs are placeholders.
func TestNoSecrets(t *testing.T) {
	b, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Global    map[string]any `yaml:"global"`
		Receivers []receiver     `yaml:"receivers"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"slack_api_url", "pagerduty_url", "opsgenie_api_key", "wechat_api_secret", "victorops_api_key", "telegram_api_url"} {
		if _, ok := cfg.Global[k]; ok {
			t.Errorf("global.%s is set: use the receiver's _file setting", k)
		}
	}
	var names []string
	secretFile := regexp.MustCompile(`^/etc/alertmanager/secrets/[a-z-]+$`)
	for _, r := range cfg.Receivers {
		names = append(names, r.Name)
		for _, c := range r.PagerDuty {
			for _, k := range []string{"routing_key", "service_key"} {
				if _, ok := c[k]; ok {
					t.Errorf("receiver %s: pagerduty %s inline; use %s_file", r.Name, k, k)
				}
			}
			if f, _ := c["routing_key_file"].(string); !secretFile.MatchString(f) {
				t.Errorf("receiver %s: pagerduty routing_key_file %q, want a file under /etc/alertmanager/secrets/", r.Name, f)
			}
		}
		for _, c := range r.Slack {
			if _, ok := c["api_url"]; ok {
				t.Errorf("receiver %s: slack api_url inline; use api_url_file", r.Name)
			}
			if f, _ := c["api_url_file"].(string); !secretFile.MatchString(f) {
				t.Errorf("receiver %s: slack api_url_file %q, want a file under /etc/alertmanager/secrets/", r.Name, f)
			}
		}
		for _, c := range r.Webhook {
			u, _ := c["url"].(string)
			if !strings.Contains(u, ".example.invalid/") {
				t.Errorf("receiver %s: webhook url %q, want a placeholder under .example.invalid", r.Name, u)
			}
		}
	}
	if want := []string{"sluice-page", "sluice-ticket", "sluice-default"}; !slices.Equal(names, want) {
		t.Errorf("receivers %v, want %v", names, want)
	}
}
