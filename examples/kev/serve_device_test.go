package main

import (
	"testing"

	"github.com/kevgo/kev"
)

// TestServeDeviceList checks that -device passes a device list through to the predictor's options as written:
// kev.Load reads "cuda:0,1" and "cuda:all" (one replica per GPU).
func TestServeDeviceList(t *testing.T) {
	for _, d := range []string{"cpu", "cuda:1", "cuda:0,1", "cuda:all", "cuda:0,0"} {
		cfg, err := serveConfigFrom([]string{"-checkpoint", "x", "-device", d}, func(string) string { return "" })
		if err != nil || cfg.opts.Device != kev.Device(d) {
			t.Errorf("-device %s: %q %v", d, cfg.opts.Device, err)
		}
	}
}
