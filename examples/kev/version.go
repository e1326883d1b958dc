package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/kevgo/kev/tensor"
)

func init() {
	commands["version"] = versionCommand
	summaries["version"] = "print the version, the source revision, the Go version and the compiled-in backends"
}

// buildVersion is what kev version reports, read from the build information the Go toolchain embeds.
type buildVersion struct {
	Version  string   `json:"version"`            // the module version: a tag, a pseudo-version, or "(devel)"
	Module   string   `json:"module"`             // the module the command was built from
	Revision string   `json:"revision,omitempty"` // the VCS revision, when built from a checkout
	Time     string   `json:"time,omitempty"`     // the revision's commit time (RFC 3339)
	Modified *bool    `json:"modified,omitempty"` // whether the checkout had uncommitted changes
	Go       string   `json:"go"`                 // the Go toolchain
	Platform string   `json:"platform"`           // GOOS/GOARCH
	Backends []string `json:"backends"`           // the tensor backends compiled in ("cpu", "cuda")
	CUDA     bool     `json:"cuda"`               // whether the CUDA backend is compiled in (-tags cuda)
	Tags     string   `json:"tags,omitempty"`     // the build tags
}

// readBuildInfo is debug.ReadBuildInfo; tests replace it.
var readBuildInfo = func() (*debug.BuildInfo, bool) { return debug.ReadBuildInfo() }

// versionOf reads the command's version from its build information (nil or !ok: a binary built without module
// support, reported as "unknown").
func versionOf(bi *debug.BuildInfo, ok bool) buildVersion {
	backends := tensor.Backends()
	v := buildVersion{Version: "unknown", Module: "github.com/kevgo/kev", Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, Backends: backends, CUDA: slices.Contains(backends, "cuda")}
	if !ok || bi == nil {
		return v
	}
	if bi.Main.Path != "" {
		v.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			m := s.Value == "true"
			v.Modified = &m
		case "-tags":
			v.Tags = s.Value
		}
	}
	return v
}

// String is the text kev version prints.
func (v buildVersion) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kev %s\n", v.Version)
	fmt.Fprintf(&b, "  module    %s\n", v.Module)
	switch {
	case v.Revision != "":
		rev := v.Revision
		if v.Modified != nil {
			if *v.Modified {
				rev += " (with uncommitted changes)"
			} else {
				rev += " (clean)"
			}
		}
		fmt.Fprintf(&b, "  revision  %s\n", rev)
	case v.Version == "(devel)":
		b.WriteString("  revision  unknown (built outside a git clone, or with -buildvcs=false)\n")
	}
	if v.Time != "" {
		fmt.Fprintf(&b, "  time      %s\n", v.Time)
	}
	fmt.Fprintf(&b, "  go        %s %s\n", v.Go, v.Platform)
	cuda := "cuda: no (build with -tags cuda)"
	if v.CUDA {
		cuda = "cuda: yes"
	}
	fmt.Fprintf(&b, "  backends  %s; %s\n", strings.Join(v.Backends, ", "), cuda)
	return b.String()
}

func versionCommand(args []string) error {
	fs := newFlags("version", "[-json]")
	asJSON := fs.Bool("json", false, "print the version as a JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	v := versionOf(readBuildInfo())
	if *asJSON {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = stdout.Write(append(data, '\n'))
		return err
	}
	_, err := fmt.Fprint(stdout, v)
	return err
}
