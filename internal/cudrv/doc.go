// Package cudrv adds the CUDA driver calls that gorgonia.org/cu lacks: stream capture, CUDA graphs, pinned host
// memory, raising a kernel's dynamic shared-memory limit, a kernel launch that marshals each parameter by its real
// size, and the driver's own error names and messages. It also owns a device's context on one goroutine locked to
// an OS thread (Device).
//
// Everything except this comment and the hand-over to the owning goroutine (owner.go, which holds no CUDA
// state and is tested without a GPU) is behind the cuda build tag: gorgonia.org/cu initialises the driver when it is
// imported and exits the process when that fails, so no untagged file may import it. Build with CUDA 12.x headers
// and link against libcuda (the driver stub is enough to link):
//
//	CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go build -tags cuda ./...
//
// Handles are those of gorgonia.org/cu (cu.Stream, cu.Function, cu.DevicePtr), so both packages can be mixed.
// Driver calls use the context current on the calling OS thread: make them inside Device.Do.
package cudrv
