package accuracy

import (
	"encoding/json"
	"time"
)

// Prediction is one logged prediction: what a join needs of a served
// request.
type Prediction struct {
	// Service is the service; Key the business key outcomes join on.
	Service string `json:"s"`
	Key     string `json:"k"`
	// RequestID is the gateway's request id.
	RequestID string `json:"id"`
	// Model and Version are what answered; Route the route and Group the
	// rollout traffic group ("" outside a rollout).
	Model   string `json:"m"`
	Version string `json:"v"`
	Route   string `json:"r,omitempty"`
	Group   string `json:"g,omitempty"`
	// Slices are the configured slice headers' values, by lower-case name.
	Slices map[string]string `json:"sl,omitempty"`
	// Outputs are the scalar outputs by name (the first element of each).
	Outputs map[string]float64 `json:"o"`
	// Time is when the request arrived.
	Time time.Time `json:"t"`
	// Client is the gateway client whose request produced the prediction
	// (its client id, or "anonymous"): the one client that may post its
	// outcome, besides the sources an Outcome marks Any.
	Client string `json:"c,omitempty"`
}

// Outcome is the observed truth for one business key.
type Outcome struct {
	// Service and Key name the prediction it joins.
	Service string `json:"s"`
	Key     string `json:"k"`
	// Values are the observed values by name (an output's observed name,
	// e.g. actual_minutes).
	Values map[string]float64 `json:"v"`
	// Time is when the outcome was observed; Received when Sluice got it.
	Time     time.Time `json:"t"`
	Received time.Time `json:"rt"`
	// Client is the gateway client that posted it; it joins only a
	// prediction of the same client unless Any is set.
	Client string `json:"c,omitempty"`
	// Any marks a source that may judge any prediction: a client named in
	// the service's outcome_clients, an operate token on the admin port,
	// the outcome subject on NATS.
	Any bool `json:"a,omitempty"`
}

// mayJudge reports whether o may be joined to p: o's source may judge any
// prediction, or o was posted by the client p was served to.
func (o *Outcome) mayJudge(p *Prediction) bool { return o.Any || o.Client == p.Client }

// Entry is what the store keeps per service and key: a prediction waiting
// for its outcome, an outcome waiting for its prediction, or, once they
// joined, a marker that refuses the same outcome again until it expires.
type Entry struct {
	Prediction *Prediction `json:"p,omitempty"`
	Outcome    *Outcome    `json:"o,omitempty"`
	// Joined marks a key whose pair was counted; Prediction and Outcome
	// are dropped then.
	Joined bool `json:"j,omitempty"`
	// Service is the entry's service, kept for a joined marker's expiry
	// count.
	Service string `json:"s"`
	// Expires is when the entry is dropped (unix nanoseconds).
	Expires int64 `json:"e"`
}

// Kind names what an entry holds: "prediction", "outcome" or "joined".
func (e *Entry) Kind() string {
	switch {
	case e.Joined:
		return "joined"
	case e.Prediction != nil:
		return "prediction"
	default:
		return "outcome"
	}
}

func encodeEntry(e *Entry) ([]byte, error) { return json.Marshal(e) }

func decodeEntry(b []byte) (*Entry, error) {
	e := new(Entry)
	if err := json.Unmarshal(b, e); err != nil {
		return nil, err
	}
	return e, nil
}

// storeKey is the store's key of a service's business key.
func storeKey(service, key string) string { return service + "\x00" + key }
