package demo

import (
	"fmt"
	"os"
	"path/filepath"
)

// crdFile is the NodeRollout CRD, relative to the repository root.
const crdFile = "deploy/crds/nodewise.io_noderollouts.yaml"

// FindCRDDir returns the directory holding the CRDs: deploy/crds under the
// working directory or under the parent of the executable's directory
// (bin/nodewise → repository root), whichever has them.
func FindCRDDir() (string, error) {
	var roots []string
	if wd, err := os.Getwd(); err == nil {
		roots = append(roots, wd)
	}
	if exe, err := os.Executable(); err == nil {
		roots = append(roots, filepath.Dir(filepath.Dir(exe)))
	}
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, crdFile)); err == nil {
			return filepath.Join(r, filepath.Dir(crdFile)), nil
		}
	}
	return "", fmt.Errorf("%s not found under %v: run the demo from the repository root (make demo)", crdFile, roots)
}
