// Package procstat reads the process's memory counters from /proc/self/status (Linux) and samples their peak
// while something runs.
package procstat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// Status holds /proc/self/status memory counters in bytes: resident (VmRSS) split into anonymous (RssAnon) and
// file-backed (RssFile) pages, the resident high-water mark (VmHWM, file-backed pages included) and the peak of
// the address space (VmPeak).
type Status struct {
	VmRSS, RssAnon, RssFile, VmHWM, VmPeak int64
}

// ErrUnavailable is returned where /proc/self/status does not exist.
var ErrUnavailable = errors.New("procstat: /proc/self/status not available")

// Read returns the current counters.
func Read() (Status, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return Status{}, ErrUnavailable
	}
	return Parse(b)
}

// Parse reads the counters from the text of a /proc/PID/status file. Every field must be present, in kB.
func Parse(b []byte) (Status, error) {
	var s Status
	fields := map[string]*int64{"VmRSS": &s.VmRSS, "RssAnon": &s.RssAnon, "RssFile": &s.RssFile, "VmHWM": &s.VmHWM, "VmPeak": &s.VmPeak}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		dst, ok := fields[string(name)]
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return s, fmt.Errorf("procstat: %s: %q is not a size in kB", name, bytes.TrimSpace(rest))
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil || n < 0 {
			return s, fmt.Errorf("procstat: %s: %q is not a size in kB", name, f[0])
		}
		*dst = n << 10
		seen++
	}
	if seen != len(fields) {
		return s, fmt.Errorf("procstat: %d of the %d memory fields found", seen, len(fields))
	}
	return s, nil
}

// Sampler polls the counters every interval on its own goroutine and keeps the peak of RssAnon, which VmHWM does
// not give apart from file-backed pages.
type Sampler struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	peak int64
	err  error
}

// Sample starts a Sampler.
func Sample(interval time.Duration) *Sampler {
	s := &Sampler{stop: make(chan struct{})}
	s.poll()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.poll()
			case <-s.stop:
				return
			}
		}
	}()
	return s
}

func (s *Sampler) poll() {
	st, err := Read()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err
		return
	}
	s.peak = max(s.peak, st.RssAnon)
}

// Stop ends the sampling and returns the peak RssAnon seen, with the error of a failed read.
func (s *Sampler) Stop() (peakAnon int64, err error) {
	close(s.stop)
	s.wg.Wait()
	s.poll()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak, s.err
}
