package preflight

import (
	"strings"
	"testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

func TestCheckSkew(t *testing.T) {
	cni := v1alpha1.TargetRef{Namespace: "istio-system", Name: "istio-cni-node"}
	zt := v1alpha1.TargetRef{Namespace: "istio-system", Name: "ztunnel"}
	tmpl := func(ref v1alpha1.TargetRef, image, rev string) templateVersion {
		return templateVersion{Ref: ref, Image: image, Revision: rev}
	}
	both := func(version, rev string) []templateVersion {
		return []templateVersion{tmpl(cni, "docker.io/istio/install-cni:"+version, rev), tmpl(zt, "docker.io/istio/ztunnel:"+version, rev)}
	}
	// istiod 1.27.3 (revision 1-27, the default tag) and 1.28.1 (1-28).
	cp := controlPlane{
		revisions: []inventory.Revision{{Name: "1-27", Version: "1.27.3"}, {Name: "1-28", Version: "1.28.1"}},
		tags:      map[string]string{"default": "1-27"},
	}
	wider, err := skew.DefaultPolicy().Override([]string{"ztunnel=2", "istio-cni=2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		policy  skew.Policy
		targets []templateVersion
		cp      controlPlane
		want    []string // substrings of the error; none means allowed
	}{
		{name: "same minor as its istiod", targets: both("1.28.1", "1-28"), cp: cp},
		{name: "one minor behind its istiod", targets: both("1.27.3", "1-28"), cp: cp},
		{name: "a suffixed build of the same version", targets: both("1.28.1-distroless", "1-28"), cp: cp},
		{name: "no revision label follows the default tag", targets: both("1.27.3", ""), cp: cp},
		{
			name: "ztunnel newer than its istiod", targets: []templateVersion{tmpl(cni, "x/install-cni:1.28.1", "1-28"), tmpl(zt, "x/ztunnel:1.29.0", "1-28")}, cp: cp,
			want: []string{"supported version skew", "ztunnel 1.29 is newer than its control plane 1.28", "never newer"},
		},
		{
			name: "both two minors behind", targets: both("1.26.4", "1-28"), cp: cp,
			want: []string{"istio-cni 1.26 is 2 minors behind its control plane 1.28", "ztunnel 1.26 is 2 minors behind"},
		},
		{name: "two behind is fine under an override", policy: wider, targets: both("1.26.4", "1-28"), cp: cp},
		{
			name: "a revision no istiod serves", targets: both("1.29.0", "1-29"), cp: cp,
			want: []string{`runs revision "1-29", which no istiod serves`},
		},
		{
			name: "no istiod at all", targets: both("1.28.1", "1-28"), cp: controlPlane{tags: map[string]string{}},
			want: []string{"which no istiod serves"},
		},
		{
			name: "istio-cni alone follows its own revision label", targets: []templateVersion{tmpl(cni, "x/install-cni:1.29.0", "1-28")}, cp: cp,
			want: []string{"istio-cni 1.29 is newer than its control plane 1.28"},
		},
		{
			name: "an image pinned by digest cannot be shown legal", targets: []templateVersion{tmpl(zt, "x/ztunnel@sha256:abc", "1-28")}, cp: cp,
			want: []string{"cannot check the version skew of istio-system/ztunnel", "x/ztunnel@sha256:abc"},
		},
		{name: "a target that is neither ztunnel nor istio-cni is not checked", targets: []templateVersion{tmpl(v1alpha1.TargetRef{Namespace: "kube-system", Name: "other"}, "x/other:latest", "")}, cp: cp},
	} {
		policy := tc.policy
		if policy == nil {
			policy = skew.DefaultPolicy()
		}
		err := checkSkew(policy, "node-1", tc.targets, tc.cp)
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: allowed, want refused with %q", tc.name, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.name, err, w)
			}
		}
	}
}
