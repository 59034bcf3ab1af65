package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/shm"
)

// Reasons of the shared-memory endpoints.
const (
	reasonSharedMemoryNotFound = "shared_memory_not_found"
	reasonSharedMemoryExists   = "shared_memory_exists"
	reasonCUDASharedMemory     = "cuda_shared_memory_unsupported"
)

// maxRegisterBody bounds a register request's JSON.
const maxRegisterBody = 64 << 10

// sharedMemoryRoutes registers Triton's system shared-memory endpoints
// (docs/protocol/extension_shared_memory.md) and answers the CUDA ones
// with "not supported".
func (h *Handler) sharedMemoryRoutes() {
	h.mux.HandleFunc("GET /v2/systemsharedmemory/status", h.handleSHMStatus)
	h.mux.HandleFunc("GET /v2/systemsharedmemory/region/{region}/status", h.handleSHMStatus)
	h.mux.HandleFunc("POST /v2/systemsharedmemory/region/{region}/register", h.handleSHMRegister)
	h.mux.HandleFunc("POST /v2/systemsharedmemory/unregister", h.handleSHMUnregister)
	h.mux.HandleFunc("POST /v2/systemsharedmemory/region/{region}/unregister", h.handleSHMUnregister)
	for _, p := range []string{"GET /v2/cudasharedmemory/status", "GET /v2/cudasharedmemory/region/{region}/status",
		"POST /v2/cudasharedmemory/region/{region}/register", "POST /v2/cudasharedmemory/unregister",
		"POST /v2/cudasharedmemory/region/{region}/unregister"} {
		h.mux.HandleFunc(p, h.handleCUDASHM)
	}
}

// shmError maps a registry error to a domain error.
func shmError(err error) error {
	switch {
	case errors.Is(err, shm.ErrNotFound):
		return infer.Errorf(infer.KindNotFound, reasonSharedMemoryNotFound, "%s", err.Error())
	case errors.Is(err, shm.ErrExists):
		return infer.Errorf(infer.KindConflict, reasonSharedMemoryExists, "%s", err.Error())
	}
	return infer.Errorf(infer.KindInvalid, shm.ReasonInvalid, "%s", err.Error())
}

func (h *Handler) handleSHMStatus(w http.ResponseWriter, r *http.Request) {
	st, err := h.opts.SharedMemory.Status(r.PathValue("region"))
	if err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), shmError(err))
		return
	}
	h.writeJSONValue(w, r, st)
}

func (h *Handler) handleSHMRegister(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Request-Id")
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRegisterBody+1))
	if err != nil {
		h.writeError(w, r, id, invalidf(reasonInvalidRequest, "read body: %v", err))
		return
	}
	if len(body) > maxRegisterBody {
		h.writeError(w, r, id, infer.Errorf(infer.KindResourceExhausted, reasonBodyTooLarge, "a register request is at most %d bytes", maxRegisterBody))
		return
	}
	var req struct {
		Key      *string `json:"key"`
		Offset   uint64  `json:"offset"`
		ByteSize *uint64 `json:"byte_size"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		h.writeError(w, r, id, invalidf(reasonInvalidJSON, "register body: %v", err))
		return
	}
	switch {
	case req.Key == nil:
		h.writeError(w, r, id, invalidf(reasonInvalidRequest, `register body: "key" is required`))
		return
	case req.ByteSize == nil:
		h.writeError(w, r, id, invalidf(reasonInvalidRequest, `register body: "byte_size" is required`))
		return
	}
	if err := h.opts.SharedMemory.Register(r.PathValue("region"), *req.Key, req.Offset, *req.ByteSize); err != nil {
		h.writeError(w, r, id, shmError(err))
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *Handler) handleSHMUnregister(w http.ResponseWriter, r *http.Request) {
	if err := h.opts.SharedMemory.Unregister(r.PathValue("region")); err != nil {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), infer.Errorf(infer.KindInternal, reasonInternal, "unregister: %v", err))
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *Handler) handleCUDASHM(w http.ResponseWriter, r *http.Request) {
	h.writeError(w, r, r.Header.Get("X-Request-Id"), infer.Errorf(infer.KindUnsupported, reasonCUDASharedMemory,
		"CUDA shared memory is not supported on this server (it runs no GPU); use system shared memory (/v2/systemsharedmemory)"))
}
