package revisions

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestHaltedGauge: nodewise_migration_halted is 1 for as long as the
// migration is Halted (the alert NodewiseMigrationHalted reads it), 0 after.
func TestHaltedGauge(t *testing.T) {
	c, err := New(Config{Kube: fake.NewClientset(), Migrations: noMigrations{}, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	rm := &v1alpha1.RevisionMigration{}
	rm.Name = "to-1-28"
	for _, tc := range []struct {
		phase v1alpha1.MigrationPhase
		want  float64
	}{{v1alpha1.MigrationProgressing, 0}, {v1alpha1.MigrationHalted, 1}, {v1alpha1.MigrationHalted, 1}, {v1alpha1.MigrationAborted, 0}} {
		rm.Status.Phase = tc.phase
		c.observePhases(rm)
		if got := testutil.ToFloat64(c.halted.WithLabelValues("to-1-28")); got != tc.want {
			t.Errorf("phase %s: nodewise_migration_halted %v, want %v", tc.phase, got, tc.want)
		}
	}
}

// noMigrations is a RevisionMigrations client New accepts; the test calls
// none of its methods.
type noMigrations struct {
	v1alpha1.RevisionMigrationInterface
}
