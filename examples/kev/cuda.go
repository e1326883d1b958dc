//go:build cuda

package main

// Built with the cuda tag, the command can run on NVIDIA GPUs: -device cuda.
import _ "github.com/kevgo/kev/tensor/cuda"
