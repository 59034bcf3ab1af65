package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/sluice-ml/sluice/internal/apierr"
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
// (docs/protocol/extension_shared_memory.md) and the CUDA ones as a
// CPU-only Triton answers them: status lists nothing, unregister has
// nothing to do, register is not supported.
func (h *Handler) sharedMemoryRoutes() {
	h.mux.HandleFunc("GET /v2/systemsharedmemory/status", h.handleSHMStatus)
	h.mux.HandleFunc("GET /v2/systemsharedmemory/region/{region}/status", h.handleSHMStatus)
	h.mux.HandleFunc("POST /v2/systemsharedmemory/region/{region}/register", h.handleSHMRegister)
	h.mux.HandleFunc("POST /v2/systemsharedmemory/unregister", h.handleSHMUnregister)
	h.mux.HandleFunc("POST /v2/systemsharedmemory/region/{region}/unregister", h.handleSHMUnregister)
	h.mux.HandleFunc("GET /v2/cudasharedmemory/status", h.handleCUDASHMStatus)
	h.mux.HandleFunc("GET /v2/cudasharedmemory/region/{region}/status", h.handleCUDASHMStatus)
	h.mux.HandleFunc("POST /v2/cudasharedmemory/region/{region}/register", h.handleCUDASHMRegister)
	h.mux.HandleFunc("POST /v2/cudasharedmemory/unregister", h.handleCUDASHMUnregister)
	h.mux.HandleFunc("POST /v2/cudasharedmemory/region/{region}/unregister", h.handleCUDASHMUnregister)
}

// shmError maps a registry error to a domain error.
func shmError(err error) error {
	switch {
	case errors.Is(err, shm.ErrNotFound):
		return apierr.Errorf(apierr.KindNotFound, reasonSharedMemoryNotFound, "%s", err.Error())
	case errors.Is(err, shm.ErrExists):
		return apierr.Errorf(apierr.KindConflict, reasonSharedMemoryExists, "%s", err.Error())
	case errors.Is(err, shm.ErrDisabled):
		return apierr.Errorf(apierr.KindUnsupported, shm.ReasonDisabled, "%s", err.Error())
	case errors.Is(err, shm.ErrRegionInvalid):
		return apierr.Errorf(apierr.KindInvalid, shm.ReasonRegionInvalid, "%s", err.Error())
	}
	return apierr.Errorf(apierr.KindInvalid, shm.ReasonInvalid, "%s", err.Error())
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
		h.writeError(w, r, id, invalidf(reasonBodyTooLarge, "a register request is at most %d bytes", maxRegisterBody))
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
		if !errors.Is(err, shm.ErrDisabled) {
			err = apierr.Errorf(apierr.KindInternal, reasonInternal, "unregister: %v", err)
		}
		h.writeError(w, r, r.Header.Get("X-Request-Id"), shmError(err))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleCUDASHMStatus lists no CUDA region (none can be registered), as a
// CPU-only Triton does; a named one is not found.
func (h *Handler) handleCUDASHMStatus(w http.ResponseWriter, r *http.Request) {
	if name := r.PathValue("region"); name != "" {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), apierr.Errorf(apierr.KindNotFound, reasonSharedMemoryNotFound,
			"Unable to find cuda shared memory region: '%s'", name))
		return
	}
	h.writeJSONValue(w, r, []shm.Status{})
}

// handleCUDASHMUnregister has no CUDA region to unregister: 200, as a
// CPU-only Triton answers (tritonclient's shm examples call it).
func (h *Handler) handleCUDASHMUnregister(w http.ResponseWriter, r *http.Request) {
	if h.opts.SharedMemory.Disabled() {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), shmError(shm.ErrDisabledError()))
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *Handler) handleCUDASHMRegister(w http.ResponseWriter, r *http.Request) {
	if h.opts.SharedMemory.Disabled() {
		h.writeError(w, r, r.Header.Get("X-Request-Id"), shmError(shm.ErrDisabledError()))
		return
	}
	h.writeError(w, r, r.Header.Get("X-Request-Id"), apierr.Errorf(apierr.KindUnsupported, reasonCUDASharedMemory,
		"failed to register CUDA shared memory region '%s': CUDA shared memory is not supported on this server (it runs no GPU); use system shared memory (/v2/systemsharedmemory)", r.PathValue("region")))
}
