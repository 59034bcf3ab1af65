package gateway

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/sluice-ml/sluice/internal/accuracy"
	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/gateway/accesslog"
	"github.com/sluice-ml/sluice/internal/gateway/auth"
)

// Online accuracy: a service with an accuracy block logs a share of its
// predictions (release/accuracylog) to the joiner, which joins the outcomes
// posted later (POST /v1/services/<name>/outcomes here, with a client's
// API key; POST /accuracy/<name>/outcomes on the admin port, with an
// operate token).

// Accuracy is the joiner of predictions and outcomes (accuracy.Joiner).
type Accuracy interface {
	// SetServices applies the services' accuracy blocks.
	SetServices(list []accuracy.Service)
	// Offer logs a prediction; it never blocks.
	Offer(p *accuracy.Prediction, features map[string]any) bool
	// Ingest joins outcomes; one result per outcome.
	Ingest(ctx context.Context, outs []accuracy.Outcome) ([]string, error)
	// Compare sums up the joined pairs of a rollout group per slice.
	Compare(service, group, output, candidate string) []accuracy.SliceComparison
	// Status is the accuracy of every service, for the admin API.
	Status() []accuracy.ServiceStatus
}

// Reasons of outcome posts.
const (
	ReasonInvalidOutcome       = "invalid_outcome"
	ReasonAccuracyNotEnabled   = "accuracy_not_configured"
	ReasonOutcomeNotPermitted  = "outcome_not_permitted"
	reasonAccuracyStoreFailure = "accuracy_store_unavailable"
)

// serveOutcomes answers POST /v1/services/<name>/outcomes on the
// gateway's listener: a configured client (not an anonymous caller),
// under the client's rate limit. An outcome joins only a prediction
// served to the posting client, unless the service's outcome_clients
// names it (a labelling pipeline may judge every prediction); others are
// not stored (result not_permitted; a post none of whose outcomes may be
// stored is answered 403 outcome_not_permitted).
func (g *Gateway) serveOutcomes(w http.ResponseWriter, r *http.Request, name string) {
	st := g.state.Load()
	s, ok := st.byName[name]
	if !ok {
		writeError(w, "", http.StatusNotFound, ReasonNotFound, "no service named "+quoteName(name))
		return
	}
	var entry accesslog.Entry
	id, err := g.admit(r.Context(), st, r.Header, r.RemoteAddr, r.TLS, &entry)
	if err != nil {
		writeHTTPError(w, "", err)
		return
	}
	if id.Anonymous {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		writeError(w, "", http.StatusUnauthorized, auth.ReasonMissingAPIKey, "posting outcomes needs a client API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'")
		return
	}
	src := outcomeSource{client: id.ClientID}
	if a := s.cfg.Accuracy; a != nil {
		src.any = slices.Contains(a.OutcomeClients, id.ClientID)
	}
	g.ingestOutcomes(w, r, s, src)
}

// outcomeSource is who posts outcomes: a gateway client, and whether it
// may judge any prediction of the service (outcome_clients, or an operate
// token on the admin port) or only its own.
type outcomeSource struct {
	client string
	any    bool
}

// ingestOutcomes reads the body of an outcome post from src and joins it.
func (g *Gateway) ingestOutcomes(w http.ResponseWriter, r *http.Request, s *service, src outcomeSource) {
	if s.cfg.Accuracy == nil || g.opts.Accuracy == nil {
		writeError(w, "", http.StatusNotFound, ReasonAccuracyNotEnabled, "service "+quoteName(s.name)+" has no accuracy block")
		return
	}
	body, err := readBody(w, r, g.opts.MaxBodyBytes)
	if err != nil {
		writeHTTPError(w, "", err)
		return
	}
	outs, err := accuracy.ParseOutcomes(s.name, body)
	if err != nil {
		writeError(w, "", http.StatusBadRequest, ReasonInvalidOutcome, err.Error())
		return
	}
	for i := range outs {
		outs[i].Client, outs[i].Any = src.client, src.any
	}
	results, err := g.opts.Accuracy.Ingest(r.Context(), outs)
	if err != nil {
		g.logger.Warn("outcomes not stored", "service", s.name, "outcomes", len(outs), "err", err)
		writeHTTPError(w, "", apierr.Errorf(apierr.KindUnavailable, reasonAccuracyStoreFailure, "the pending store did not take the outcomes; retry"))
		return
	}
	counts := map[string]int{}
	for _, res := range results {
		counts[res]++
	}
	if s.rollout != nil && counts[accuracy.ResultJoined] > 0 && s.cfg.Rollout.Gates.Accuracy != nil {
		// The accuracy gate is judged as outcomes arrive, not only on the
		// next tick.
		s.rollout.Controller().Tick(r.Context(), g.opts.Now())
	}
	if n := counts[accuracy.ResultNotPermitted]; n > 0 && n == len(results) {
		// Nothing was stored: the predictions were served to another
		// client, and this one is not in outcome_clients.
		g.logger.Info("outcomes refused: not the predictions' client", "service", s.name, "client_id", src.client, "outcomes", n)
		writeError(w, "", http.StatusForbidden, ReasonOutcomeNotPermitted,
			"client "+quoteName(src.client)+" may post outcomes only of predictions served to it (service "+quoteName(s.name)+"; accuracy.outcome_clients names clients that may post any)")
		return
	}
	writeJSON(w, http.StatusOK, outcomeAnswer{Service: s.name, Results: results, Counts: counts})
}

// outcomeAnswer is the answer to an outcome post: one result per outcome,
// in order, and the count of each.
type outcomeAnswer struct {
	Service string         `json:"service"`
	Results []string       `json:"results"`
	Counts  map[string]int `json:"counts"`
}

// outcomesPath returns the service name of a POST
// /v1/services/<name>/outcomes path.
func outcomesPath(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1/services/")
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, "/outcomes")
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", false
	}
	return name, true
}

func quoteName(s string) string { return `"` + s + `"` }

// errNoJoiner is the build error of a service with an accuracy block in
// a gateway without a joiner.
var errNoJoiner = errors.New("has an accuracy block, but the gateway has no accuracy joiner")

// accuracyServices lists the accuracy blocks of cfg's services for the
// joiner.
func accuracyServices(st *state) []accuracy.Service {
	var out []accuracy.Service
	for _, sc := range st.cfg.Services {
		if sc.Accuracy != nil {
			out = append(out, accuracy.Service{Name: sc.Name, Spec: *sc.Accuracy})
		}
	}
	return out
}

// accuracyState is the admin view: every service's online accuracy.
func (g *Gateway) accuracyState() []accuracy.ServiceStatus {
	if g.opts.Accuracy == nil {
		return []accuracy.ServiceStatus{}
	}
	return g.opts.Accuracy.Status()
}

// isOutcomesPath reports whether path is /v1/services/<name>/outcomes.
func isOutcomesPath(path string) bool {
	_, ok := outcomesPath(path)
	return ok
}
