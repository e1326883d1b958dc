//go:build !unix

package layers

import "time"

// cpuTime returns zero: the CPU time is not read on this system.
func cpuTime() time.Duration { return 0 }
