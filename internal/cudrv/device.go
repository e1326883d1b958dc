//go:build cuda

package cudrv

/*
#include <stdint.h>

// The owning thread of each Device carries the Device's id in a thread-local word, so that Do can tell, with
// one cheap call, whether it already runs there.
static __thread uint64_t kev_owner;
static void kev_set_owner(uint64_t id) { kev_owner = id; }
static uint64_t kev_get_owner(void) { return kev_owner; }
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"

	"gorgonia.org/cu"
)

// Device owns one CUDA context on one goroutine locked to its OS thread. Every driver call for this device must
// run inside Do: CUDA contexts are current per OS thread. Do called from inside Do (on the owning thread) runs
// its function at once, so code that makes many calls saves the hand-over per call by wrapping them all in one Do.
type Device struct {
	Ordinal int
	Dev     cu.Device
	Ctx     cu.CUContext

	id     uint64 // ≠ 0, unique in the process: the owning thread's mark
	own    *owner
	hops   atomic.Int64
	inline atomic.Int64
}

// Stats counts Do calls: Hops were handed to the owning goroutine (a channel send and a thread wake-up each),
// Inline ran at once because they were made on the owning thread.
type Stats struct {
	Hops, Inline int64
}

var lastID atomic.Uint64

// Info describes a device.
type Info struct {
	Name          string
	Major, Minor  int   // compute capability
	SMs           int   // multiprocessors
	Memory        int64 // bytes
	L2Bytes       int
	SharedPerSM   int // bytes of shared memory per multiprocessor
	SharedOptin   int // most dynamic shared memory one block may ask for
	DriverVersion int // e.g. 13000
}

// Open creates a context on device ordinal and starts the goroutine that owns it.
func Open(ordinal int) (*Device, error) {
	d := &Device{Ordinal: ordinal, id: lastID.Add(1), own: newOwner()}
	ready := make(chan error, 1)
	go d.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Device) loop(ready chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread dies with the goroutine when the context is gone
	C.kev_set_owner(C.uint64_t(d.id))
	if err := d.start(); err != nil {
		d.own.stop()
		ready <- err
		return
	}
	ready <- nil
	d.own.serve(func() {
		_ = d.Ctx.Destroy() // nothing to report to: the Device is closed
	})
}

// start creates the context on the calling (owning) thread.
func (d *Device) start() error {
	n, err := cu.NumDevices()
	if err != nil {
		return Wrap("cuDeviceGetCount", err)
	}
	if d.Ordinal < 0 || d.Ordinal >= n {
		return fmt.Errorf("cudrv: device ordinal %d out of range [0, %d)", d.Ordinal, n)
	}
	if d.Dev, err = cu.GetDevice(d.Ordinal); err != nil {
		return Wrap("cuDeviceGet", err)
	}
	if d.Ctx, err = d.Dev.MakeContext(cu.SchedAuto); err != nil {
		return Wrap("cuCtxCreate", err)
	}
	return nil
}

// OnOwner reports whether the caller runs on the OS thread that owns the context (inside Do).
func (d *Device) OnOwner() bool { return uint64(C.kev_get_owner()) == d.id }

// Stats returns the Do counters so far.
func (d *Device) Stats() Stats { return Stats{Hops: d.hops.Load(), Inline: d.inline.Load()} }

// Do runs f on the goroutine that owns the context and returns its error. Calls from several goroutines are
// serialised. Called from inside Do, it runs f at once on the same goroutine (nested calls cost no hand-over).
// f must not call runtime.Goexit (testing's Fatal: it would end the owning goroutine) nor wait for another
// goroutine that calls Do (it would deadlock); it may call the driver directly. A panic in f comes back as an
// error from the outermost Do. After Close, Do returns ErrClosed.
func (d *Device) Do(f func() error) error {
	if d.OnOwner() {
		d.inline.Add(1)
		return f()
	}
	d.hops.Add(1)
	return d.own.do(f)
}

// Close destroys the context once the function the owning goroutine runs, if any, has returned; Do calls not yet
// handed over get ErrClosed. The Device cannot be used afterwards; closing it again does nothing. Close may not be
// called inside Do (it would wait for itself): there it returns an error.
func (d *Device) Close() error {
	if d.OnOwner() {
		return errors.New("cudrv: Close called inside Do")
	}
	d.own.close()
	return nil
}

// Info reads the device's name, capability and limits. Call it inside Do.
func (d *Device) Info() (Info, error) {
	var in Info
	var err error
	if in.Name, err = d.Dev.Name(); err != nil {
		return in, Wrap("cuDeviceGetName", err)
	}
	if in.Major, in.Minor, err = d.Dev.ComputeCapability(); err != nil {
		return in, Wrap("cuDeviceGetAttribute", err)
	}
	if in.Memory, err = d.Dev.TotalMem(); err != nil {
		return in, Wrap("cuDeviceTotalMem", err)
	}
	attrs := []struct {
		a cu.DeviceAttribute
		p *int
	}{
		{cu.MultiprocessorCount, &in.SMs},
		{cu.L2CacheSize, &in.L2Bytes},
		{cu.MaxSharedMemoryPerMultiprocessor, &in.SharedPerSM},
	}
	for _, a := range attrs {
		if *a.p, err = d.Dev.Attribute(a.a); err != nil {
			return in, Wrap("cuDeviceGetAttribute", err)
		}
	}
	if in.SharedOptin, err = SharedOptin(d.Dev); err != nil {
		return in, err
	}
	in.DriverVersion, err = DriverVersion()
	return in, err
}
