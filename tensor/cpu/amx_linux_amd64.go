package cpu

import (
	"syscall"
	"unsafe"
)

// Linux hands out the AMX tile state only to processes that ask for it.
const (
	archGetXCompPerm = 0x1022 // ARCH_GET_XCOMP_PERM
	archReqXCompPerm = 0x1023 // ARCH_REQ_XCOMP_PERM
	xfeatureTileData = 18     // XFEATURE_XTILEDATA
)

// amxPermit asks the kernel for the tile data state (once, for the whole
// process) and reports whether it was granted.
func amxPermit() bool {
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXCompPerm, xfeatureTileData, 0); e != 0 {
		return false
	}
	var perm uint64
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archGetXCompPerm, uintptr(unsafe.Pointer(&perm)), 0); e != 0 {
		return false
	}
	return perm&(1<<xfeatureTileData) != 0
}
