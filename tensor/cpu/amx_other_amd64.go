//go:build !linux

package cpu

// amxPermit is false: the AMX kernel asks for the tile state the Linux way
// only.
func amxPermit() bool { return false }
