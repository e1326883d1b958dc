//go:build cuda

package cuda

import "unsafe"

func unsafePtr(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
