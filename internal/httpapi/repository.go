package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/modelrepo"
)

// The handlers in this file are off the inference path; they use
// encoding/json for their small bodies.

func (h *Handler) handleLive(w http.ResponseWriter, _ *http.Request) {
	if h.models.Live() {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
}

func (h *Handler) handleReady(w http.ResponseWriter, _ *http.Request) {
	if h.models.Ready() {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
}

func (h *Handler) handleServerMetadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, h.serverMeta)
}

// tensorMetadata is one input or output in the model metadata response.
type tensorMetadata struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// modelMetadata is the model metadata response. Provenance from a
// version's model_config.json travels in parameters (version_label,
// git_commit), which the protocol leaves open for extensions, and so does
// loaded_at (RFC 3339), when the version began to serve.
type modelMetadata struct {
	Name       string            `json:"name"`
	Versions   []string          `json:"versions"`
	Platform   string            `json:"platform"`
	Inputs     []tensorMetadata  `json:"inputs"`
	Outputs    []tensorMetadata  `json:"outputs"`
	Parameters map[string]string `json:"parameters,omitempty"`
}

func (h *Handler) handleModelMetadata(w http.ResponseWriter, r *http.Request) {
	md, err := h.models.Metadata(r.Context(), r.PathValue("model"), r.PathValue("version"))
	if err == nil && md == nil {
		err = apierr.Errorf(apierr.KindInternal, reasonInternal, "model '%s' has no metadata", r.PathValue("model"))
	}
	if err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	out := modelMetadata{
		Name:     md.Name,
		Versions: md.Versions,
		Platform: md.Platform,
		Inputs:   tensorsMetadata(md.Inputs),
		Outputs:  tensorsMetadata(md.Outputs),
	}
	if out.Versions == nil {
		out.Versions = []string{}
	}
	if md.Label != "" || md.GitCommit != "" || !md.LoadedAt.IsZero() {
		out.Parameters = map[string]string{}
		if !md.LoadedAt.IsZero() {
			out.Parameters["loaded_at"] = rfc3339(md.LoadedAt)
		}
		if md.Label != "" {
			out.Parameters["version_label"] = md.Label
		}
		if md.GitCommit != "" {
			out.Parameters["git_commit"] = md.GitCommit
		}
	}
	h.writeJSONValue(w, r, out)
}

func tensorsMetadata(ts []modelrepo.TensorMeta) []tensorMetadata {
	out := make([]tensorMetadata, len(ts))
	for i, t := range ts {
		shape := []int64(t.Shape)
		if shape == nil {
			shape = []int64{}
		}
		out[i] = tensorMetadata{Name: t.Name, Datatype: t.DataType.String(), Shape: shape}
	}
	return out
}

func (h *Handler) handleModelReady(w http.ResponseWriter, r *http.Request) {
	if err := h.models.ModelReady(r.Context(), r.PathValue("model"), r.PathValue("version")); err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *Handler) handleModelConfig(w http.ResponseWriter, r *http.Request) {
	cfg, err := h.models.Config(r.Context(), r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	b, err := modelconfig.MarshalJSON(cfg)
	if err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	// loaded_at is a Sluice extension beside Triton's fields (clients that
	// read the config as a dict ignore it).
	if md, err := h.models.Metadata(r.Context(), r.PathValue("model"), r.PathValue("version")); err == nil && md != nil && !md.LoadedAt.IsZero() {
		b = withLoadedAt(b, md.LoadedAt)
	}
	writeJSON(w, b)
}

// rfc3339 formats a load time for the repository API: UTC, milliseconds.
func rfc3339(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// withLoadedAt adds "loaded_at" as the last member of a JSON object.
func withLoadedAt(obj []byte, t time.Time) []byte {
	obj = bytes.TrimRight(obj, " \t\r\n")
	if len(obj) < 2 || obj[len(obj)-1] != '}' {
		return obj
	}
	sep := ","
	if len(bytes.TrimSpace(obj[1:len(obj)-1])) == 0 {
		sep = ""
	}
	out := append([]byte{}, obj[:len(obj)-1]...)
	out = append(out, sep+`"loaded_at":"`+rfc3339(t)+`"}`...)
	return out
}

// duration is Triton's {count, ns} pair.
type duration struct {
	Count uint64 `json:"count"`
	Ns    uint64 `json:"ns"`
}

func durationOf(d modelrepo.Duration) duration { return duration{Count: d.Count, Ns: d.Ns} }

// inferenceStats is Triton's inference_stats object.
type inferenceStats struct {
	Success       duration `json:"success"`
	Fail          duration `json:"fail"`
	Queue         duration `json:"queue"`
	ComputeInput  duration `json:"compute_input"`
	ComputeInfer  duration `json:"compute_infer"`
	ComputeOutput duration `json:"compute_output"`
	CacheHit      duration `json:"cache_hit"`
	CacheMiss     duration `json:"cache_miss"`
}

type batchStats struct {
	BatchSize     uint64   `json:"batch_size"`
	ComputeInput  duration `json:"compute_input"`
	ComputeInfer  duration `json:"compute_infer"`
	ComputeOutput duration `json:"compute_output"`
}

type modelStats struct {
	Name           string         `json:"name"`
	Version        string         `json:"version"`
	LastInference  int64          `json:"last_inference"`
	InferenceCount uint64         `json:"inference_count"`
	ExecutionCount uint64         `json:"execution_count"`
	InferenceStats inferenceStats `json:"inference_stats"`
	BatchStats     []batchStats   `json:"batch_stats"`
}

func (h *Handler) handleStats(w http.ResponseWriter, r *http.Request) {
	stats, err := h.models.Statistics(r.Context(), r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	out := struct {
		ModelStats []modelStats `json:"model_stats"`
	}{ModelStats: make([]modelStats, len(stats))}
	for i, s := range stats {
		ms := modelStats{
			Name:           s.Name,
			Version:        s.Version,
			LastInference:  s.LastInference,
			InferenceCount: s.InferenceCount,
			ExecutionCount: s.ExecutionCount,
			InferenceStats: inferenceStats{
				Success:       durationOf(s.Success),
				Fail:          durationOf(s.Fail),
				Queue:         durationOf(s.Queue),
				ComputeInput:  durationOf(s.ComputeInput),
				ComputeInfer:  durationOf(s.ComputeInfer),
				ComputeOutput: durationOf(s.ComputeOutput),
				CacheHit:      durationOf(s.CacheHit),
				CacheMiss:     durationOf(s.CacheMiss),
			},
			BatchStats: make([]batchStats, len(s.BatchStats)),
		}
		for j, b := range s.BatchStats {
			ms.BatchStats[j] = batchStats{
				BatchSize:     b.BatchSize,
				ComputeInput:  durationOf(b.ComputeInput),
				ComputeInfer:  durationOf(b.ComputeInfer),
				ComputeOutput: durationOf(b.ComputeOutput),
			}
		}
		out.ModelStats[i] = ms
	}
	h.writeJSONValue(w, r, out)
}

// indexEntry is one row of the repository index response.
type indexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	// LoadedAt (RFC 3339) is a Sluice extension: when the serving load of
	// the version began to serve.
	LoadedAt string `json:"loaded_at,omitempty"`
}

func (h *Handler) handleIndex(w http.ResponseWriter, r *http.Request) {
	body, err := h.readBody(w, r)
	if err == nil {
		var ready bool
		if ready, err = parseIndexRequest(body); err == nil {
			h.writeIndex(w, r, ready)
			return
		}
	}
	h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
}

// parseIndexRequest reads a repository index request body: empty, or an
// object with an optional boolean "ready". As Triton, a "ready" that is
// not a boolean is refused without reading it further, so however deeply
// it nests the answer is Triton's "Invalid value for 'ready': expected a
// boolean" (QA L0_http test_repository_index_deeply_nested_json).
func parseIndexRequest(body []byte) (bool, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return false, nil
	}
	s := &scanner{buf: body}
	ready := false
	err := s.readObject(1, func(key []byte) error {
		if string(key) != "ready" {
			return invalidf(reasonInvalidRequest, "decode request body: unknown field %q", key)
		}
		if c := s.peek(); c != 't' && c != 'f' {
			return invalidf(reasonInvalidRequest, "Invalid value for 'ready': expected a boolean")
		}
		lit, err := s.readLiteral()
		ready = lit == 't'
		return err
	})
	if err != nil {
		return false, err
	}
	return ready, s.atEnd()
}

// writeIndex answers a repository index request.
func (h *Handler) writeIndex(w http.ResponseWriter, r *http.Request, ready bool) {
	entries := h.models.Index(r.Context(), ready)
	out := make([]indexEntry, len(entries))
	for i, e := range entries {
		out[i] = indexEntry{Name: e.Name, Version: e.Version, State: string(e.State), Reason: e.Reason}
		if !e.LoadedAt.IsZero() {
			out[i].LoadedAt = rfc3339(e.LoadedAt)
		}
	}
	h.writeJSONValue(w, r, out)
}

// loadParamPrefix marks a load parameter carrying a model file.
const loadParamPrefix = "file:"

func (h *Handler) handleLoad(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := h.readSmallJSON(w, r, &req); err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	opts, err := loadOptions(r.PathValue("model"), req.Parameters)
	if err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	if err := h.models.Load(r.Context(), r.PathValue("model"), opts); err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// loadOptions turns the load parameters of model name into
// modelrepo.LoadOptions: "config" is a JSON model configuration in a
// string, each "file:<path>" a base64 file at that path in the model
// folder. As in Triton, files need a config; the checks are the gRPC
// edge's (LoadOptions.Check), so both take the same requests.
func loadOptions(name string, params map[string]json.RawMessage) (modelrepo.LoadOptions, error) {
	var opts modelrepo.LoadOptions
	for key, raw := range params {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return opts, invalidf(reasonInvalidParameter, "load parameter %q must be a string", key)
		}
		switch {
		case key == "config":
			cfg, err := modelconfig.ParseJSON([]byte(s))
			if err != nil {
				return opts, modelrepo.ConfigParamError(name, err)
			}
			opts.Config = cfg
		case strings.HasPrefix(key, loadParamPrefix):
			p := strings.TrimPrefix(key, loadParamPrefix)
			data, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return opts, invalidf(reasonInvalidParameter, "load parameter %q: content is not valid base64: %v", key, err)
			}
			if opts.Files == nil {
				opts.Files = map[string][]byte{}
			}
			opts.Files[p] = data
		default:
			return opts, invalidf(reasonInvalidParameter, "unknown load parameter %q (expected \"config\" or \"%s<version>/<path>\")", key, loadParamPrefix)
		}
	}
	return opts, opts.Check(name)
}

func (h *Handler) handleUnload(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := h.readSmallJSON(w, r, &req); err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	var opts modelrepo.UnloadOptions
	for key, raw := range req.Parameters {
		if key != "unload_dependents" {
			h.writeError(w, r, r.Header.Get("X-Request-Id"),
				invalidf(reasonInvalidParameter, "unknown unload parameter %q (expected \"unload_dependents\")", key))
			return
		}
		if err := json.Unmarshal(raw, &opts.UnloadDependents); err != nil {
			h.writeError(w, r, r.Header.Get("X-Request-Id"),
				invalidf(reasonInvalidParameter, "unload parameter %q must be a bool", key))
			return
		}
	}
	if err := h.models.Unload(r.Context(), r.PathValue("model"), opts); err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// readSmallJSON decodes an optional JSON object body into v. An empty body
// leaves v as it is. Unknown fields are errors, so typos do not pass
// silently.
func (h *Handler) readSmallJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF):
			return invalidf(reasonInvalidJSON, "invalid JSON at byte offset %d: unexpected end of input", len(body))
		case errors.As(err, &se):
			return invalidf(reasonInvalidJSON, "invalid JSON at byte offset %d: %v", se.Offset, se)
		case errors.As(err, &te):
			return invalidf(reasonInvalidRequest, "field %q must be %s, got JSON %s", te.Field, te.Type, te.Value)
		default:
			return invalidf(reasonInvalidRequest, "decode request body: %v", err)
		}
	}
	if dec.More() {
		return invalidf(reasonInvalidJSON, "invalid JSON at byte offset %d: unexpected data after the top-level value", dec.InputOffset())
	}
	return nil
}
