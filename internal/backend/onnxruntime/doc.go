// Package onnxruntime runs ONNX models with ONNX Runtime through
// github.com/yalue/onnxruntime_go, which opens libonnxruntime.so.1 with
// dlopen at start-up. The binary therefore builds without the library, but
// it needs cgo: a CGO_ENABLED=0 build compiles a stub whose New reports that
// the backend is not built in.
//
// Tensors cross the boundary in the KServe v2 wire layout of package infer.
// Numeric inputs are handed to ONNX Runtime without copying when their
// bytes are suitably aligned; outputs are allocated by ONNX Runtime, copied
// once into Go memory and returned in that memory.
//
// ONNX Runtime's environment is global to the process, so the package counts
// the Backends that use it and destroys it when the last one that created
// it closes.
package onnxruntime
