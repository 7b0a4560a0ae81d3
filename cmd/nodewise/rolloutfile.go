package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/deploy/crds"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// rolloutFile is a NodeRollout read from -f: the typed object, its policy,
// and the document as written (what apply sends).
type rolloutFile struct {
	rollout *v1alpha1.NodeRollout
	policy  model.Policy
	doc     []byte // JSON
	// warnings are what is valid but likely a mistake (model.Policy.Warnings).
	warnings []string
}

// warn prints the file's warnings, one a line, as kubectl prints the API
// server's: they do not fail the command.
func (rf rolloutFile) warn(w io.Writer) {
	for _, m := range rf.warnings {
		fmt.Fprintln(w, "Warning: "+m)
	}
}

// readRollout reads and validates one NodeRollout from path (- is stdin) the
// way the API server and the orchestrator would: strictly typed, as a policy,
// its gates as the judge reads them, and against the CRD's schema and rules
// (names, sets, enums, CEL). Every problem is returned on one line.
func readRollout(ctx context.Context, stdin io.Reader, path string, addrs remote.AddressPolicy) (rolloutFile, error) {
	doc, err := readManifest(stdin, path)
	if err != nil {
		return rolloutFile{}, err
	}
	v, err := crds.ForKind("NodeRollout")
	if err != nil {
		return rolloutFile{}, err
	}
	obj := map[string]any{}
	if err := json.Unmarshal(doc, &obj); err != nil {
		return rolloutFile{}, fmt.Errorf("malformed NodeRollout: %w", err)
	}
	if err := strictFields(v, obj); err != nil {
		return rolloutFile{}, err
	}
	nr, p, perr := model.ParseRollout(doc)
	if nr == nil {
		return rolloutFile{}, errors.New(planner.OneLine(perr))
	}
	msgs := []string{}
	if perr != nil {
		msgs = append(msgs, planner.OneLine(perr))
	}
	// The judge's own reading of spec.gates says more than the schema
	// ("listed twice", "must be a decimal number"): it goes first, and the
	// schema's errors under spec.gates are then left out.
	gerr := checkGates(ctx, nr.Spec.Gates, addrs, true)
	if gerr != nil {
		msgs = append(msgs, gerr.Error())
	}
	for _, fe := range v.Validate(ctx, obj) {
		// The policy check already names some fields (maxParallel: 0); say each once.
		if gerr != nil && strings.HasPrefix(fe.Field, "spec.gates") {
			continue
		}
		if perr == nil || !strings.Contains(perr.Error(), fe.Field) {
			msgs = append(msgs, fe.Error())
		}
	}
	if len(msgs) > 0 {
		return rolloutFile{}, errors.New(strings.Join(msgs, "; "))
	}
	return rolloutFile{rollout: nr, policy: p, doc: doc, warnings: p.Warnings(time.Now())}, nil
}

// strictFields refuses the fields of a NodeRollout that its CRD's schema does
// not name, as the API server's strict field validation (kubectl's default)
// does before anything else: by path, case-sensitively, in the server's
// words, with the field meant when only the case differs. Another kind is
// left to ParseRollout, which names the kind it wants.
func strictFields(v *crds.Validator, obj map[string]any) error {
	if obj["kind"] != "NodeRollout" || obj["apiVersion"] != v1alpha1.GroupVersion.String() {
		return nil
	}
	paths, err := v.UnknownFields(obj)
	if err != nil {
		return fmt.Errorf("malformed NodeRollout: %w", err)
	}
	if len(paths) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(paths))
	for _, p := range paths {
		m := fmt.Sprintf("unknown field %q", p)
		if want := v.Suggest(p); want != "" {
			m += " (did you mean " + want + "?)"
		}
		msgs = append(msgs, m)
	}
	return errors.New("strict decoding error: " + strings.Join(msgs, ", "))
}
