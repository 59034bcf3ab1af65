package grpcapi

import (
	"context"
	"errors"

	"github.com/sluice-ml/sluice/internal/infer"
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
		return infer.Errorf(infer.KindNotFound, reasonSharedMemoryNotFound, "%s", err.Error())
	case errors.Is(err, shm.ErrExists):
		return infer.Errorf(infer.KindConflict, reasonSharedMemoryExists, "%s", err.Error())
	}
	return infer.Errorf(infer.KindInvalid, shm.ReasonInvalid, "%s", err.Error())
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
		return nil, s.fail(ctx, "SystemSharedMemoryUnregister", infer.Errorf(infer.KindInternal, reasonInternal, "unregister: %v", err))
	}
	return &pb.SystemSharedMemoryUnregisterResponse{}, nil
}

func cudaUnsupported() error {
	return toStatus(infer.Errorf(infer.KindUnsupported, reasonCUDASharedMemory,
		"CUDA shared memory is not supported on this server (it runs no GPU); use system shared memory"))
}

// CudaSharedMemoryStatus answers that CUDA shared memory is not supported.
func (s *Service) CudaSharedMemoryStatus(context.Context, *pb.CudaSharedMemoryStatusRequest) (*pb.CudaSharedMemoryStatusResponse, error) {
	return nil, cudaUnsupported()
}

// CudaSharedMemoryRegister answers that CUDA shared memory is not supported.
func (s *Service) CudaSharedMemoryRegister(context.Context, *pb.CudaSharedMemoryRegisterRequest) (*pb.CudaSharedMemoryRegisterResponse, error) {
	return nil, cudaUnsupported()
}

// CudaSharedMemoryUnregister answers that CUDA shared memory is not
// supported.
func (s *Service) CudaSharedMemoryUnregister(context.Context, *pb.CudaSharedMemoryUnregisterRequest) (*pb.CudaSharedMemoryUnregisterResponse, error) {
	return nil, cudaUnsupported()
}
