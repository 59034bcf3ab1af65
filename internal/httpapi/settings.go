package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/tritonsettings"
)

// maxSettingsBody bounds a settings update.
const maxSettingsBody = 64 << 10

// settingsRoutes registers Triton's logging and trace extensions, when
// the handler has settings.
func (h *Handler) settingsRoutes() {
	if h.opts.Settings == nil {
		return
	}
	h.mux.HandleFunc("GET /v2/logging", h.handleGetLogging)
	h.mux.HandleFunc("POST /v2/logging", h.handlePostLogging)
	h.mux.HandleFunc("GET /v2/trace/setting", h.handleGetTrace)
	h.mux.HandleFunc("POST /v2/trace/setting", h.handlePostTrace)
	h.mux.HandleFunc("GET /v2/models/{model}/trace/setting", h.handleGetTrace)
	h.mux.HandleFunc("POST /v2/models/{model}/trace/setting", h.handlePostTrace)
}

// readSettings decodes a settings update body into v.
func readSettings(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxSettingsBody+1))
	if err != nil {
		return invalidf(reasonInvalidRequest, "read body: %v", err)
	}
	if len(body) > maxSettingsBody {
		return invalidf(reasonBodyTooLarge, "a settings update is at most %d bytes", maxSettingsBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return invalidf(reasonInvalidJSON, "settings: %v", err)
	}
	return nil
}

func (h *Handler) handleGetLogging(w http.ResponseWriter, r *http.Request) {
	h.writeJSONValue(w, r, h.opts.Settings.Log())
}

func (h *Handler) handlePostLogging(w http.ResponseWriter, r *http.Request) {
	var raw map[string]any
	if err := readSettings(r, &raw); err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	update := make(map[string]any, len(raw))
	for k, v := range raw {
		if n, ok := v.(json.Number); ok {
			i, err := n.Int64()
			if err != nil {
				h.writeError(w, r, r.Header.Get("X-Request-Id"), invalidf(reasonInvalidParameter, "log setting '%s' must be an integer, got %s", k, n))
				return
			}
			v = i
		}
		update[k] = v
	}
	got, err := h.opts.Settings.UpdateLog(update)
	if err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	h.writeJSONValue(w, r, got)
}

// traceJSON writes trace settings as Triton's HTTP API does: a list of
// one value as the value itself.
func traceJSON(s map[string][]string) map[string]any {
	out := make(map[string]any, len(s))
	for k, v := range s {
		if len(v) == 1 && k != "trace_level" {
			out[k] = v[0]
		} else {
			out[k] = v
		}
	}
	return out
}

// traceModel checks that the model of a per-model trace settings request
// exists, answering Triton's "Request for unknown model : M" if not.
func (h *Handler) traceModel(w http.ResponseWriter, r *http.Request) (string, bool) {
	model := r.PathValue("model")
	if model != "" {
		if err := h.models.ModelReady(r.Context(), model, ""); err != nil {
			if ie, ok := errors.AsType[*apierr.Error](err); ok && ie.Kind == apierr.KindNotFound {
				h.writeError(w, r, r.Header.Get("X-Request-Id"), tritonsettings.UnknownModel(model))
				return "", false
			}
		}
	}
	return model, true
}

func (h *Handler) handleGetTrace(w http.ResponseWriter, r *http.Request) {
	model, ok := h.traceModel(w, r)
	if !ok {
		return
	}
	h.writeJSONValue(w, r, traceJSON(h.opts.Settings.Trace(model)))
}

func (h *Handler) handlePostTrace(w http.ResponseWriter, r *http.Request) {
	model, ok := h.traceModel(w, r)
	if !ok {
		return
	}
	var raw map[string]any
	if err := readSettings(r, &raw); err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	update := make(map[string][]string, len(raw))
	for k, v := range raw {
		switch x := v.(type) {
		case nil:
			update[k] = nil
		case string:
			update[k] = []string{x}
		case json.Number:
			update[k] = []string{x.String()}
		case []any:
			for _, e := range x {
				s, ok := e.(string)
				if !ok {
					h.writeError(w, r, r.Header.Get("X-Request-Id"), invalidf(reasonInvalidParameter, "trace setting '%s' must be a string or a list of strings", k))
					return
				}
				update[k] = append(update[k], s)
			}
		default:
			h.writeError(w, r, r.Header.Get("X-Request-Id"), invalidf(reasonInvalidParameter, "trace setting '%s' must be a string or a list of strings", k))
			return
		}
	}
	got, err := h.opts.Settings.UpdateTrace(model, update)
	if err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), err)
		return
	}
	h.writeJSONValue(w, r, traceJSON(got))
}
