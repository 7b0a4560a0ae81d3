package main

import (
	"strings"
	"testing"
)

func TestRunRejectsBadInputWithOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "cert and key files are required"},
		{[]string{"-mode=turbo", "-tls-cert=a", "-tls-key=b", "-token-file=c"}, `mode "turbo": want one of auto, ebpf, proc`},
		{[]string{"-tls-cert=/nonexistent/tls.crt", "-tls-key=/nonexistent/tls.key", "-token-file=/nonexistent/token"}, "loading TLS certificate"},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
	} {
		err := run(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("run(%q) = %v, want one line containing %q", tc.args, err, tc.want)
		}
	}
}
