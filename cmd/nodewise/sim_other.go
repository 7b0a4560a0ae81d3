//go:build !linux

package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// The built-in simulated cluster and the demo build network namespaces, mount
// and run a kubelet: Linux only. Elsewhere (the krew plugin on macOS) the
// commands exist and say so, so the CLI's help reads the same everywhere.
func newSimCmd(*globalFlags) *cobra.Command {
	return linuxOnly("sim", "Run the built-in simulated cluster (Linux only)")
}
func newDemoCmd(*globalFlags) *cobra.Command {
	return linuxOnly("demo", "Run the demo on the built-in simulated cluster (Linux only)")
}

func linuxOnly(use, short string) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Hidden: false,
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("nodewise %s needs Linux (network namespaces, a kubelet); this is %s/%s", use, runtime.GOOS, runtime.GOARCH)
		},
	}
}
