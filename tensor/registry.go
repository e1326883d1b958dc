package tensor

import (
	"fmt"
	"sort"
	"sync"
)

// Factory makes a new Backend instance.
type Factory func() (Backend, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Factory{}
)

// Register makes a backend available under name. It is meant to be called
// from a backend package's init function; registering the same name twice or
// a nil factory panics, as database/sql.Register does.
func Register(name string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if f == nil {
		panic("tensor: Register factory is nil for " + name)
	}
	if _, dup := registry[name]; dup {
		panic("tensor: Register called twice for backend " + name)
	}
	registry[name] = f
}

// Open returns a new instance of the backend registered under name.
func Open(name string) (Backend, error) {
	registryMu.RLock()
	f, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("tensor: unknown backend %q (registered: %v; forgotten blank import?)", name, Backends())
	}
	return f()
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
