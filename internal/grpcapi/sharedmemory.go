package grpcapi

import (
	"context"
	"errors"

	"github.com/sluice-ml/sluice/internal/apierr"
	pb "github.com/sluice-ml/sluice/internal/pb/inferencepb"
	"github.com/sluice-ml/sluice/internal/shm"
)

// Reasons of the shared-memory RPCs (the same as over HTTP).
const (
	reasonSharedMemoryNotFound = "shared_memory_not_found"
	reasonSharedMemoryExists   = "shared_memory_exists"
	reasonCUDASharedMemory     = "cuda_shared_memory_unsupported"
)

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

// SystemSharedMemoryStatus implements Triton's system shared-memory
// extension: the registered regions, or one of them.
func (s *Service) SystemSharedMemoryStatus(ctx context.Context, req *pb.SystemSharedMemoryStatusRequest) (*pb.SystemSharedMemoryStatusResponse, error) {
	st, err := s.opts.SharedMemory.Status(req.GetName())
	if err != nil {
		return nil, s.fail(ctx, "SystemSharedMemoryStatus", shmError(err))
	}
	out := &pb.SystemSharedMemoryStatusResponse{Regions: make(map[string]*pb.SystemSharedMemoryStatusResponse_RegionStatus, len(st))}
	for _, r := range st {
		out.Regions[r.Name] = &pb.SystemSharedMemoryStatusResponse_RegionStatus{Name: r.Name, Key: r.Key, Offset: r.Offset, ByteSize: r.ByteSize}
	}
	return out, nil
}

// SystemSharedMemoryRegister registers a region.
func (s *Service) SystemSharedMemoryRegister(ctx context.Context, req *pb.SystemSharedMemoryRegisterRequest) (*pb.SystemSharedMemoryRegisterResponse, error) {
	if err := s.opts.SharedMemory.Register(req.GetName(), req.GetKey(), req.GetOffset(), req.GetByteSize()); err != nil {
		return nil, s.fail(ctx, "SystemSharedMemoryRegister", shmError(err))
	}
	return &pb.SystemSharedMemoryRegisterResponse{}, nil
}

// SystemSharedMemoryUnregister unregisters a region, or all of them when
// the name is empty.
func (s *Service) SystemSharedMemoryUnregister(ctx context.Context, req *pb.SystemSharedMemoryUnregisterRequest) (*pb.SystemSharedMemoryUnregisterResponse, error) {
	if err := s.opts.SharedMemory.Unregister(req.GetName()); err != nil {
		if !errors.Is(err, shm.ErrDisabled) {
			err = apierr.Errorf(apierr.KindInternal, reasonInternal, "unregister: %v", err)
		}
		return nil, s.fail(ctx, "SystemSharedMemoryUnregister", shmError(err))
	}
	return &pb.SystemSharedMemoryUnregisterResponse{}, nil
}

// CudaSharedMemoryStatus lists no CUDA region (none can be registered),
// as a CPU-only Triton does; a named one is not found.
func (s *Service) CudaSharedMemoryStatus(ctx context.Context, req *pb.CudaSharedMemoryStatusRequest) (*pb.CudaSharedMemoryStatusResponse, error) {
	if name := req.GetName(); name != "" {
		return nil, s.fail(ctx, "CudaSharedMemoryStatus", apierr.Errorf(apierr.KindNotFound, reasonSharedMemoryNotFound,
			"Unable to find cuda shared memory region: '%s'", name))
	}
	return &pb.CudaSharedMemoryStatusResponse{Regions: map[string]*pb.CudaSharedMemoryStatusResponse_RegionStatus{}}, nil
}

// CudaSharedMemoryRegister answers that CUDA shared memory is not
// supported (or that client shared memory is disabled).
func (s *Service) CudaSharedMemoryRegister(ctx context.Context, req *pb.CudaSharedMemoryRegisterRequest) (*pb.CudaSharedMemoryRegisterResponse, error) {
	if s.opts.SharedMemory.Disabled() {
		return nil, s.fail(ctx, "CudaSharedMemoryRegister", shmError(shm.ErrDisabledError()))
	}
	return nil, s.fail(ctx, "CudaSharedMemoryRegister", apierr.Errorf(apierr.KindUnsupported, reasonCUDASharedMemory,
		"failed to register CUDA shared memory region '%s': CUDA shared memory is not supported on this server (it runs no GPU); use system shared memory", req.GetName()))
}

// CudaSharedMemoryUnregister has no CUDA region to unregister: success, as
// a CPU-only Triton answers (tritonclient's shm examples call it).
func (s *Service) CudaSharedMemoryUnregister(ctx context.Context, _ *pb.CudaSharedMemoryUnregisterRequest) (*pb.CudaSharedMemoryUnregisterResponse, error) {
	if s.opts.SharedMemory.Disabled() {
		return nil, s.fail(ctx, "CudaSharedMemoryUnregister", shmError(shm.ErrDisabledError()))
	}
	return &pb.CudaSharedMemoryUnregisterResponse{}, nil
}
