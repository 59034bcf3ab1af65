package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxAdminBody bounds what the console reads from one admin API answer.
const maxAdminBody = 8 << 20

// GatewayFromAdmin reads the gateway's state from its admin API handler
// (gateway.Gateway.AdminHandler) in process, without a network hop.
func GatewayFromAdmin(admin http.Handler) GatewaySource {
	return adminGateway{get: func(ctx context.Context, path string) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
		if err != nil {
			return 0, nil, err
		}
		w := &memoryWriter{header: http.Header{}, code: http.StatusOK}
		admin.ServeHTTP(w, req)
		return w.code, w.body.Bytes(), nil
	}}
}

// GatewayFromURL reads the gateway's state from the admin API at base
// (e.g. "http://127.0.0.1:9901") with client; a nil client uses
// http.DefaultClient.
func GatewayFromURL(client *http.Client, base string) GatewaySource {
	return adminGateway{get: func(ctx context.Context, path string) (int, []byte, error) {
		return Fetch(ctx, client, strings.TrimRight(base, "/")+path)
	}}
}

// Fetch GETs url and returns the status code and at most 8 MiB of the
// body.
func Fetch(ctx context.Context, client *http.Client, url string) (int, []byte, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminBody))
	return resp.StatusCode, b, err
}

// memoryWriter is an http.ResponseWriter that keeps the answer.
type memoryWriter struct {
	header http.Header
	code   int
	wrote  bool
	body   bytes.Buffer
}

func (w *memoryWriter) Header() http.Header { return w.header }

func (w *memoryWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
}

func (w *memoryWriter) Write(p []byte) (int, error) {
	w.wrote = true
	if w.body.Len()+len(p) > maxAdminBody {
		return 0, errors.New("admin answer too large")
	}
	return w.body.Write(p)
}

type adminGateway struct {
	get func(ctx context.Context, path string) (int, []byte, error)
}

// getJSON decodes the admin answer at path into v.
func (a adminGateway) getJSON(ctx context.Context, path string, v any) error {
	code, b, err := a.get(ctx, path)
	if err != nil {
		return fmt.Errorf("admin %s: %w", path, err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("admin %s: status %d", path, code)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("admin %s: %w", path, err)
	}
	return nil
}

// The admin API's answers, as far as the console reads them.
type (
	wireRoutes []struct {
		Service string    `json:"service"`
		Path    string    `json:"path"`
		Model   wireModel `json:"model"`
		// Routes are config.Route values; their keys are normalized
		// (lower case, no underscores) before decoding, so they decode
		// whether the admin API writes Go field names or snake_case.
		Routes json.RawMessage `json:"routes"`
	}
	wireModel struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	wireRoute struct {
		Name  string `json:"name"`
		Match struct {
			Headers []struct {
				Name    string  `json:"name"`
				Exact   *string `json:"exact"`
				Prefix  *string `json:"prefix"`
				Regex   *string `json:"regex"`
				Present *bool   `json:"present"`
			} `json:"headers"`
			EntityHash *struct {
				Key    string `json:"key"`
				Modulo int    `json:"modulo"`
				Below  int    `json:"below"`
			} `json:"entityhash"`
		} `json:"match"`
		Route struct {
			Weighted []Target `json:"weighted"`
			Sticky   string   `json:"stickykey"`
		} `json:"route"`
		Timeout wireDuration `json:"timeout"`
		Retries *struct {
			NumRetries int `json:"numretries"`
		} `json:"retries"`
	}
	wireBackends []struct {
		Backend   string     `json:"backend"`
		Kind      string     `json:"kind"`
		Endpoints []Endpoint `json:"endpoints"`
	}
	wireBreakers []struct {
		Service string `json:"service"`
		Breaker
	}
	wireFallbacks []struct {
		Service    string    `json:"service"`
		Output     string    `json:"output"`
		Rule       string    `json:"rule"`
		Triggered  bool      `json:"triggered"`
		Since      time.Time `json:"since"`
		RecentP90  *float64  `json:"recent_p90"`
		OnUpstream bool      `json:"on_upstream_failure"`
		Baseline   struct {
			Lower   *float64 `json:"lower"`
			Upper   *float64 `json:"upper"`
			Buckets float64  `json:"buckets"` // hours of history behind it
		} `json:"baseline"`
	}
	wireRollouts []struct {
		Service    string    `json:"service"`
		State      string    `json:"state"`
		Stage      int       `json:"stage"`
		StageName  string    `json:"stage_name"`
		StageSince time.Time `json:"stage_since"`
		Stable     struct {
			Version string `json:"version"`
		} `json:"stable"`
		Candidate struct {
			Version string `json:"version"`
		} `json:"candidate"`
		Stages []struct {
			TrafficPercent float64 `json:"traffic_percent"`
		} `json:"stages"`
		Reason *struct {
			Message string `json:"message"`
		} `json:"reason"`
	}
	wireShadow struct {
		Services []struct {
			Service string `json:"service"`
			Shadow
		} `json:"services"`
	}
)

// wireDuration decodes a duration written as nanoseconds or as a Go
// duration string.
type wireDuration time.Duration

func (d *wireDuration) UnmarshalJSON(b []byte) error {
	if s, err := strconv.Unquote(string(b)); err == nil {
		v, err := time.ParseDuration(s)
		*d = wireDuration(v)
		return err
	}
	var n int64
	err := json.Unmarshal(b, &n)
	*d = wireDuration(n)
	return err
}

// Gateway reads /routes, /breakers, /fallback, /rollout, /shadow,
// /endpoints, /ready and, when there, /accuracy and /ratelimit.
func (a adminGateway) Gateway(ctx context.Context) (*Gateway, error) {
	var (
		routes    wireRoutes
		backends  wireBackends
		breakers  wireBreakers
		fallbacks wireFallbacks
		rollouts  wireRollouts
		shadow    wireShadow
	)
	for _, r := range []struct {
		path string
		v    any
	}{
		{"/routes", &routes},
		{"/endpoints", &backends},
		{"/breakers", &breakers},
		{"/fallback", &fallbacks},
		{"/rollout", &rollouts},
		{"/shadow", &shadow},
	} {
		if err := a.getJSON(ctx, r.path, r.v); err != nil {
			return nil, err
		}
	}
	// Online accuracy is optional: an admin API without it (an older
	// gateway) leaves the services without accuracy.
	var accuracy []struct {
		Service string           `json:"service"`
		Window  string           `json:"window"`
		Series  []AccuracySeries `json:"series"`
	}
	_ = a.getJSON(ctx, "/accuracy", &accuracy)
	// Clients' rate-limit use is optional too.
	var limits struct {
		Clients []Client `json:"clients"`
	}
	_ = a.getJSON(ctx, "/ratelimit", &limits)
	code, _, err := a.get(ctx, "/ready")
	if err != nil {
		return nil, fmt.Errorf("admin /ready: %w", err)
	}
	g := &Gateway{Ready: code == http.StatusOK, Services: []Service{}, Backends: []Backend{}, Clients: limits.Clients}
	for _, r := range routes {
		s := Service{Name: r.Service, Path: r.Path, Model: r.Model.Name, ModelVersion: r.Model.Version, Routes: []Route{}}
		var wr []wireRoute
		if err := decodeNormalized(r.Routes, &wr); err != nil {
			return nil, fmt.Errorf("admin /routes: service %s: %w", r.Service, err)
		}
		for _, x := range wr {
			s.Routes = append(s.Routes, x.route())
		}
		for i := range breakers {
			if breakers[i].Service == s.Name {
				b := breakers[i].Breaker
				s.Breaker = &b
			}
		}
		for _, f := range fallbacks {
			if f.Service == s.Name {
				s.Fallback = &Fallback{Output: f.Output, Rule: f.Rule, Triggered: f.Triggered, Since: f.Since, RecentP90: f.RecentP90, OnUpstreamFailure: f.OnUpstream}
				if f.Baseline.Buckets > 0 {
					s.Fallback.Lower, s.Fallback.Upper = f.Baseline.Lower, f.Baseline.Upper
				}
			}
		}
		for _, ro := range rollouts {
			if ro.Service != s.Name {
				continue
			}
			v := &Rollout{
				State: ro.State, Stage: ro.Stage, StageName: ro.StageName, Stages: len(ro.Stages), StageSince: ro.StageSince,
				Stable: ro.Stable.Version, Candidate: ro.Candidate.Version,
			}
			if ro.Stage >= 0 && ro.Stage < len(ro.Stages) {
				v.Traffic = ro.Stages[ro.Stage].TrafficPercent
			}
			if ro.Reason != nil {
				v.Reason = ro.Reason.Message
			}
			s.Rollout = v
		}
		for _, acc := range accuracy {
			if acc.Service == s.Name {
				s.Accuracy, s.AccuracyWindow = acc.Series, acc.Window
			}
		}
		for i := range shadow.Services {
			if shadow.Services[i].Service == s.Name {
				sh := shadow.Services[i].Shadow
				s.Shadow = &sh
			}
		}
		g.Services = append(g.Services, s)
	}
	for _, b := range backends {
		eps := b.Endpoints
		if eps == nil {
			eps = []Endpoint{}
		}
		g.Backends = append(g.Backends, Backend{Name: b.Backend, Kind: b.Kind, Endpoints: eps})
	}
	return g, nil
}

func (x *wireRoute) route() Route {
	r := Route{Name: x.Name, Targets: x.Route.Weighted, StickyKey: x.Route.Sticky}
	if r.Targets == nil {
		r.Targets = []Target{}
	}
	if x.Timeout > 0 {
		r.Timeout = time.Duration(x.Timeout).String()
	}
	if x.Retries != nil {
		r.Retries = x.Retries.NumRetries
	}
	var conds []string
	for _, h := range x.Match.Headers {
		switch {
		case h.Exact != nil:
			conds = append(conds, h.Name+" = "+strconv.Quote(*h.Exact))
		case h.Prefix != nil:
			conds = append(conds, h.Name+" starts with "+strconv.Quote(*h.Prefix))
		case h.Regex != nil:
			conds = append(conds, h.Name+" ~ "+strconv.Quote(*h.Regex))
		case h.Present != nil && *h.Present:
			conds = append(conds, h.Name+" present")
		case h.Present != nil:
			conds = append(conds, h.Name+" absent")
		}
	}
	if e := x.Match.EntityHash; e != nil {
		conds = append(conds, fmt.Sprintf("hash(%s) %% %d < %d", e.Key, e.Modulo, e.Below))
	}
	r.Match = "all"
	if len(conds) > 0 {
		r.Match = strings.Join(conds, " and ")
	}
	return r
}

// decodeNormalized decodes JSON into v after lower-casing its object keys
// and removing their underscores.
func decodeNormalized(b []byte, v any) error {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	var raw any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	nb, err := json.Marshal(normalizeKeys(raw))
	if err != nil {
		return err
	}
	return json.Unmarshal(nb, v)
}

func normalizeKeys(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[strings.ReplaceAll(strings.ToLower(k), "_", "")] = normalizeKeys(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = normalizeKeys(e)
		}
		return x
	default:
		return v
	}
}
