//go:build !race

package kev

// raceEnabled is set when the tests run with the race detector, which slows the CPU kernels about twentyfold.
const raceEnabled = false
