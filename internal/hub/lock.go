package hub

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// inProcess holds one single-slot channel per lock path, so goroutines of
// this process queue up before they take the file lock.
var inProcess sync.Map // lock path -> chan struct{}

// lockPollInterval is how often a lock held by another process is retried.
const lockPollInterval = 50 * time.Millisecond

// acquire takes the lock at path for this goroutine: first the in-process
// slot, then an exclusive flock on the file (the lock huggingface_hub's
// FileLock takes, so a Python download of the same blob waits for ours and
// the other way round). It gives up when ctx ends.
func acquire(ctx context.Context, path string) (release func(), err error) {
	v, _ := inProcess.LoadOrStore(path, make(chan struct{}, 1))
	slot := v.(chan struct{})
	select {
	case slot <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		<-slot
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		<-slot
		return nil, err
	}
	for {
		ok, err := tryLockFile(f)
		if err != nil {
			f.Close()
			<-slot
			return nil, err
		}
		if ok {
			break
		}
		t := time.NewTimer(lockPollInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			f.Close()
			<-slot
			return nil, ctx.Err()
		}
	}
	return func() {
		unlockFile(f)
		f.Close()
		<-slot
	}, nil
}
