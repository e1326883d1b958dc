// Programmatic dependent launch. On compute capability 9.0 the device launches kernels with programmatic stream
// serialisation (cuLaunchKernelEx): a kernel may become resident while the kernel before it on the stream is still
// running, so its launch overlaps the other's tail. Every kernel therefore begins with KEV_GRID_DEP(): it waits
// until the grids it depends on have completed and their memory is visible (griddepcontrol.wait) before it reads or
// writes anything, then lets the next kernel launch early (griddepcontrol.launch_dependents; the dependent grid
// starts once every block of this one has started, so it never takes a multiprocessor this grid still needs).
// Compiled for compute_80 (the PTX other GPUs run) it is empty.
#pragma once
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KEV_GRID_DEP()                                                                                          \
	do {                                                                                                   \
		asm volatile("griddepcontrol.wait;\n" ::: "memory");                                            \
		asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");                               \
	} while (0)
#else
#define KEV_GRID_DEP()                                                                                          \
	do {                                                                                                   \
	} while (0)
#endif
