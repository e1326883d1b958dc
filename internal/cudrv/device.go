//go:build cuda

package cudrv

import (
	"errors"
	"fmt"
	"runtime"

	"gorgonia.org/cu"
)

// Device owns one CUDA context on one goroutine locked to its OS thread. Every driver call for this device must
// run inside Do (or, for code already running inside Do, directly): CUDA contexts are current per OS thread.
type Device struct {
	Ordinal int
	Dev     cu.Device
	Ctx     cu.CUContext

	work chan func()
	done chan struct{}
}

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

// ErrClosed is returned by Do on a closed Device.
var ErrClosed = errors.New("cudrv: device is closed")

// Open creates a context on device ordinal and starts the goroutine that owns it.
func Open(ordinal int) (*Device, error) {
	d := &Device{Ordinal: ordinal, work: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go d.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Device) loop(ready chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread dies with the goroutine when the context is gone
	n, err := cu.NumDevices()
	if err != nil {
		ready <- Wrap("cuDeviceGetCount", err)
		return
	}
	if d.Ordinal < 0 || d.Ordinal >= n {
		ready <- fmt.Errorf("cudrv: device ordinal %d out of range [0, %d)", d.Ordinal, n)
		return
	}
	if d.Dev, err = cu.GetDevice(d.Ordinal); err != nil {
		ready <- Wrap("cuDeviceGet", err)
		return
	}
	if d.Ctx, err = d.Dev.MakeContext(cu.SchedAuto); err != nil {
		ready <- Wrap("cuCtxCreate", err)
		return
	}
	ready <- nil
	for f := range d.work {
		f()
	}
	err = d.Ctx.Destroy()
	_ = err // nothing to report to: Close already returned
	close(d.done)
}

// Do runs f on the goroutine that owns the context and returns its error. Calls from several goroutines are
// serialised. f must not call Do (it would deadlock) nor runtime.Goexit (testing's Fatal: it would end the owning
// goroutine); it may call the driver directly. A panic in f comes back as an error.
func (d *Device) Do(f func() error) (err error) {
	res := make(chan error, 1)
	defer func() {
		if recover() != nil { // send on closed channel
			err = ErrClosed
		}
	}()
	d.work <- func() {
		returned := false
		defer func() {
			if returned {
				return
			}
			if p := recover(); p != nil {
				res <- fmt.Errorf("cudrv: panic on the device goroutine: %v", p)
			} else { // runtime.Goexit (t.Fatal): the owning goroutine is gone
				res <- errors.New("cudrv: runtime.Goexit on the device goroutine; the device is unusable")
			}
		}()
		err := f()
		returned = true
		res <- err
	}
	return <-res
}

// Close destroys the context after the pending Do calls. The Device cannot be used afterwards.
func (d *Device) Close() error {
	close(d.work)
	<-d.done
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
