package docscheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// truth is a small CLI and CRD shaped like nodewise's: status (-w,
// --timeout), retry, revision status, skew; exit 2 for Halted, 3 for
// --timeout, 4 for skew; a NodeRollout with spec.gates.inconclusive.
func truth(t *testing.T) Truth {
	t.Helper()
	root := &cobra.Command{Use: "nodewise"}
	root.PersistentFlags().String("kubeconfig", "", "")
	status := &cobra.Command{Use: "status NAME", Run: func(*cobra.Command, []string) {}}
	status.Flags().BoolP("watch", "w", false, "")
	status.Flags().Duration("timeout", 0, "")
	retry := &cobra.Command{Use: "retry NODE", Run: func(*cobra.Command, []string) {}}
	retry.Flags().String("rollout", "", "")
	revision := &cobra.Command{Use: "revision"}
	revStatus := &cobra.Command{Use: "status NAME", Run: func(*cobra.Command, []string) {}}
	revStatus.Flags().BoolP("watch", "w", false, "")
	revision.AddCommand(revStatus)
	skew := &cobra.Command{Use: "skew", Run: func(*cobra.Command, []string) {}}
	root.AddCommand(status, retry, revision, skew)

	dir := t.TempDir()
	crd := filepath.Join(dir, "crd.yaml")
	if err := os.WriteFile(crd, []byte(testCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	kinds, err := FromCRDs(crd)
	if err != nil {
		t.Fatal(err)
	}
	exit := filepath.Join(dir, "exitcode.go")
	if err := os.WriteFile(exit, []byte(testExitCodes), 0o644); err != nil {
		t.Fatal(err)
	}
	vocab := map[string]bool{"status": true, "skew": true, "timeout": true, "revision": true}
	for _, p := range Phases(kinds) {
		vocab[p] = true
	}
	codes, err := ExitCodes(exit, vocab)
	if err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(dir, "agent")
	if err := os.Mkdir(agent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(agent, "main.go"), []byte(testAgent), 0o644); err != nil {
		t.Fatal(err)
	}
	agentCmd, err := FromFlagSets("nodeagent", agent)
	if err != nil {
		t.Fatal(err)
	}
	return Truth{
		Programs:  map[string]*Command{"nodewise": FromCobra(root), "nodeagent": agentCmd},
		ExitCodes: codes,
		Kinds:     kinds,
		Foreign:   map[string]bool{"spec.nodeName": true},
	}
}

const testExitCodes = `package main

const (
	exitOK      = 0 // done; Completed
	exitError   = 1 // anything else
	exitHalted  = 2 // status (-w): Halted or Failed; revision status: Halted or Refused
	exitTimeout = 3 // status -w --timeout: the time ran out
	exitViolation = 4 // skew: outside the supported skew
)
`

const testAgent = `package main

import "flag"

func parse(fs *flag.FlagSet) {
	var mode string
	fs.StringVar(&mode, "mode", "auto", "counting mode")
	fs.Bool("tls-csr", false, "")
}
`

const testCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: noderollouts.nodewise.io}
spec:
  group: nodewise.io
  names: {kind: NodeRollout, plural: noderollouts}
  scope: Cluster
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              paused: {type: boolean}
              gates:
                type: object
                properties:
                  inconclusive: {type: string, enum: [Pass, Pause, Fail]}
          status:
            type: object
            properties:
              phase: {type: string, enum: [Progressing, Halted, Failed, Refused, Completed]}
              nodes:
                type: array
                items:
                  type: object
                  properties:
                    verdict: {type: string}
`

// TestCheckFindsWhatTheCodeDoesNotDefine runs the checker over pages that
// each name one thing wrong, and over a page that names everything right.
func TestCheckFindsWhatTheCodeDoesNotDefine(t *testing.T) {
	tr := truth(t)
	for _, tc := range []struct{ name, doc, want string }{
		{"halted exits 1", "`nodewise status NAME` exits 1 when Halted or Failed.", `exit status 1 for "when Halted or Failed", which is exit status 2's (Failed, Halted)`},
		{"undefined exit", "`skew` exits with code 7 on a violation.", "exit status 7 is not one the CLI defines (0, 1, 2, 3, 4)"},
		{"list gives timeout 2", "exit codes: 0 done, 1 error, 2 Halted or Refused, 2 `--timeout` ran out.", `which is exit status 3's (timeout)`},
		{"exit table", "## Exit codes\n\n| code | meaning |\n|---|---|\n| 3 | `skew`: a violation |\n", `exit status 3 for "`},
		{"wrapped sentence", "It watches until Halted; exit 0 while it is\nhealthy, 2 for Halted, 4 when `--timeout`\nruns out.", `exit status 4 for "when `},
		{"unknown field", "The policy is `onInconclusive: Fail`.", "no CRD field onInconclusive takes Fail (fields that do: inconclusive)"},
		{"unknown rooted field", "Set `spec.gates.inconclusiv`.", "no field spec.gates.inconclusiv in NodeRollout"},
		{"enum value", "Under `spec.gates.inconclusive: Halt` it halts.", `does not take "Halt" (one of Pass, Pause, Fail)`},
		{"relative field", "See `gates.inconclussive: Pause`.", "no CRD object field gates (nor chart value) has inconclussive taking Pause"},
		{"status list field", "Read `status.nodes[].verdikt`.", "no field status.nodes.verdikt"},
		{"unknown command", "Run `nodewise retri NODE`.", `nodewise has no command "retri"`},
		{"unknown alternative", "`nodewise status\\|retry\\|skip NAME`", `nodewise has no command "skip"`},
		{"unknown sub", "`nodewise revision explain NAME`", `nodewise revision has no command "explain"`},
		{"flag of another command", "`nodewise retry NODE --timeout 5m`", "nodewise retry has no flag --timeout"},
		{"short flag", "`status NAME -x`", "nodewise status has no flag -x"},
		{"fenced command", "```sh\n$ nodewise status up --wait\n```", "nodewise status has no flag --wait"},
		{"bare flag", "Pass `--tls-crs` to the agent.", "--tls-crs is not a flag of"},
		{"agent flag", "`nodeagent --mode proc --listen :9443`", "nodeagent has no flag --listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Check("doc.md", tc.doc, tr)
			if len(got) != 1 || !strings.Contains(got[0].Msg, tc.want) {
				t.Errorf("Check(%q) = %v, want one finding containing %q", tc.doc, got, tc.want)
			}
		})
	}

	right := strings.Join([]string{
		"`nodewise status NAME [-w] [--timeout D]` exits 2 when Halted or Failed, 3 when `--timeout`",
		"runs out, 0 once Completed (`status.phase: Completed`).",
		"`nodewise revision status NAME -w` (exit 2 for Halted or Refused, 3 on timeout).",
		"exit codes: 0 done, 1 error, 2 Halted, 3 `-w --timeout` ran out, 4 a skew violation.",
		"`kubectl nodewise retry NODE --rollout NAME --kubeconfig K`; `nodewise status\\|retry NAME`.",
		"`spec.gates.inconclusive: Pause`, `gates.inconclusive`, `inconclusive: Fail`, `spec.paused: true`, `status.nodes[].verdict`.",
		"A Pod's `spec.nodeName`; the chart's `agent.mesh`; `restartPolicy: Never`; `health.Config`.",
		"`--tls-csr`, `nodeagent --mode=proc`, kubectl's `--field-selector`; Kured's `--ds-name`.",
		"`kubectl get events --field-selector involvedObject.name=NAME`, `helm upgrade --take-ownership`.",
		"The API server exits; a status 5 is not ours.",
		"```",
		"nodewise status up -w --timeout 2h && echo upgraded",
		"kubectl apply --server-side -k deploy/",
		"```",
	}, "\n")
	if got := Check("right.md", right, tr); len(got) != 0 {
		t.Errorf("Check(a page that names only what is defined) found %v", got)
	}
}

// TestFromFlagSetsFailsOnNoFlags: a program whose flags the reader cannot
// see must fail the check, not pass every page.
func TestFromFlagSetsFailsOnNoFlags(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FromFlagSets("probe", dir); err == nil {
		t.Error("FromFlagSets(a program with no flags) = nil error, want one")
	}
}
