package tensor

import (
	"fmt"
	"sort"
	"sync"
)

// Factory makes a new Backend instance.
type Factory func() (Backend, error)

// Devices is a backend with numbered devices (GPUs): Open makes a backend instance on device ordinal, Count says
// how many devices the machine has.
type Devices struct {
	Open  func(ordinal int) (Backend, error)
	Count func() (int, error)
}

// entry is a registered backend: a single-device one (Devices.Count nil, Open only takes ordinal 0) or one with
// numbered devices.
type entry struct {
	open  func(ordinal int) (Backend, error)
	count func() (int, error)
}

var (
	registryMu sync.RWMutex
	registry   = map[string]entry{}
)

// Register makes a backend with one device available under name. It is meant to be called from a backend
// package's init function; registering the same name twice or a nil factory panics, as database/sql.Register does.
func Register(name string, f Factory) {
	if f == nil {
		panic("tensor: Register factory is nil for " + name)
	}
	register(name, entry{open: func(ordinal int) (Backend, error) {
		if ordinal != 0 {
			return nil, fmt.Errorf("tensor: backend %q has one device, 0; no device %d", name, ordinal)
		}
		return f()
	}})
}

// RegisterDevices makes a backend with numbered devices available under name: OpenDevice(name, n) opens device n,
// Open(name) device 0. Both functions of d are required; registering the same name twice panics.
func RegisterDevices(name string, d Devices) {
	if d.Open == nil || d.Count == nil {
		panic("tensor: RegisterDevices needs Open and Count for " + name)
	}
	register(name, entry{open: d.Open, count: d.Count})
}

func register(name string, e entry) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("tensor: Register called twice for backend " + name)
	}
	registry[name] = e
}

func lookup(name string) (entry, error) {
	registryMu.RLock()
	e, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return entry{}, fmt.Errorf("tensor: unknown backend %q (registered: %v; forgotten blank import?)", name, Backends())
	}
	return e, nil
}

// Open returns a new instance of the backend registered under name, on its device 0.
func Open(name string) (Backend, error) { return OpenDevice(name, 0) }

// OpenDevice returns a new instance of the backend registered under name on its device ordinal. Every call makes
// a new instance: two instances on one device share it (each has its own memory and work queue).
func OpenDevice(name string, ordinal int) (Backend, error) {
	e, err := lookup(name)
	if err != nil {
		return nil, err
	}
	if ordinal < 0 {
		return nil, fmt.Errorf("tensor: backend %q: negative device %d", name, ordinal)
	}
	return e.open(ordinal)
}

// DeviceCount returns how many devices the backend registered under name can open: 1 for a backend registered
// with Register, the machine's count for one registered with RegisterDevices (which may be 0, or an error when
// the driver cannot be asked).
func DeviceCount(name string) (int, error) {
	e, err := lookup(name)
	if err != nil {
		return 0, err
	}
	if e.count == nil {
		return 1, nil
	}
	return e.count()
}

// Backends returns the sorted names of the registered backends.
func Backends() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
