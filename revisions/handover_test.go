package revisions

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestStableTagHold: the stable tag moves to To unless a namespace the
// migration did not move would follow it: one labelled with the tag and no
// istio-injection (which would take precedence), while the tag points
// elsewhere than To.
func TestStableTagHold(t *testing.T) {
	spec := v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Tag: "canary", StableTag: "stable"}
	ns := func(name string, l map[string]string) corev1.Namespace {
		return corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	}
	nss := []corev1.Namespace{
		ns("moved", map[string]string{"istio.io/rev": "stable"}),
		ns("opted-out", map[string]string{"istio.io/rev": "stable", "istio-injection": "disabled"}),
		ns("on-rev", map[string]string{"istio.io/rev": "1-27"}),
	}
	moved := map[string]bool{"moved": true}
	for name, tc := range map[string]struct {
		tags map[string]string
		nss  []corev1.Namespace
		want string // "" or a part of the hold
	}{
		"no stable tag yet":     {map[string]string{"canary": "1-28"}, append(nss, ns("other", map[string]string{"istio.io/rev": "stable"})), ""},
		"already on To":         {map[string]string{"stable": "1-28"}, append(nss, ns("other", map[string]string{"istio.io/rev": "stable"})), ""},
		"only moved namespaces": {map[string]string{"stable": "1-27"}, nss, ""},
		"an unmoved one":        {map[string]string{"stable": "1-27"}, append(nss, ns("other", map[string]string{"istio.io/rev": "stable"})), "tag stable (-> 1-27) is still used by namespaces this migration did not move: other;"},
		"two, named in order":   {map[string]string{"stable": "1-26"}, append(nss, ns("zed", map[string]string{"istio.io/rev": "stable"}), ns("abe", map[string]string{"istio.io/rev": "stable"})), "did not move: abe,zed;"},
	} {
		t.Run(name, func(t *testing.T) {
			got := stableTagHold(spec, tc.tags, tc.nss, moved)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("hold %q, want %q", got, tc.want)
			}
		})
	}
}
