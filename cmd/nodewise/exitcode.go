package main

import (
	"errors"
	"fmt"
)

// The exit statuses a pipeline can gate on, one table for every command
// (README.md, "Exit codes", lists the same):
const (
	exitOK        = 0 // done; the rollout is healthy, Completed or RolledBack; no violation
	exitError     = 1 // bad input, the API server refused or could not be reached, any other failure
	exitHalted    = 2 // status (-w): the NodeRollout is Halted, Aborted or Failed; revision status (-w): the RevisionMigration is Halted, Aborted or Refused
	exitTimeout   = 3 // status -w --timeout, revision status -w --timeout: the time ran out before a terminal phase
	exitViolation = 4 // skew: a data-plane component is outside the supported skew; precheck: an error finding
)

// exitCodeError is an error with the exit status it means.
type exitCodeError struct {
	code int
	err  error
}

func (e exitCodeError) Error() string { return e.err.Error() }
func (e exitCodeError) Unwrap() error { return e.err }

func withExitCode(code int, format string, args ...any) error {
	return exitCodeError{code: code, err: fmt.Errorf(format, args...)}
}

// exitCode is the status err means: its own, else exitError (nil: exitOK).
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var e exitCodeError
	if errors.As(err, &e) {
		return e.code
	}
	return exitError
}
