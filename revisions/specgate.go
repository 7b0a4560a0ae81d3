package revisions

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/gatespec"
	"github.com/nodewise/nodewise/health/remote"
)

// SpecGates gates each wave with the Prometheus gates its RevisionMigration's
// spec.gates.prometheus describes, and with readiness alone when it describes
// none:
//
//   - the user's queries (ExternalGates), when there are any;
//   - the built-in gates, on whenever an address is set unless
//     builtIn.disabled: config acceptance per revision (istiod's rejected
//     xDS responses) and retry volume (the wave's retries per request
//     against the control namespaces'). They pass, with a reason, when
//     Prometheus holds nothing for them.
//
// They combine as Gates does. The gates of a migration are built once and
// kept, so their counts of consecutive query errors survive from one wave
// check to the next. addrs are the hosts spec.gates.prometheus may query; a
// refused one fails the wave, unqueried.
func SpecGates(addrs remote.AddressPolicy, log *zap.Logger) Gate {
	return &specGates{addrs: addrs, log: log, now: time.Now, byMigration: map[string]Gate{}}
}

type specGates struct {
	addrs       remote.AddressPolicy
	log         *zap.Logger
	now         func() time.Time
	mu          sync.Mutex
	byMigration map[string]Gate
}

func (s *specGates) Judge(ctx context.Context, in WaveInput) (health.Verdict, error) {
	if in.Spec == nil || in.Spec.Prometheus == nil {
		return health.Verdict{Outcome: health.Pass}, nil
	}
	s.mu.Lock()
	g, ok := s.byMigration[in.Migration]
	if !ok {
		var err error
		g, err = s.build(*in.Spec)
		if errors.Is(err, remote.ErrAddressRefused) {
			s.mu.Unlock()
			return health.Verdict{Outcome: health.Fail, Reasons: []string{err.Error()}}, nil
		}
		if err != nil {
			s.mu.Unlock()
			return health.Verdict{}, err
		}
		s.byMigration[in.Migration] = g
	}
	s.mu.Unlock()
	return g.Judge(ctx, in)
}

// build makes the gates of one migration's spec.gates.
func (s *specGates) build(spec v1alpha1.GatesSpec) (Gate, error) {
	p := spec.Prometheus
	var gates []Gate
	if len(p.Queries) > 0 {
		pg, err := gatespec.Prometheus(spec, s.addrs, s.log)
		if err != nil {
			return nil, err
		}
		gates = append(gates, ExternalGates(pg))
	}
	cfg, on, err := builtInOf(p)
	if err != nil {
		return nil, err
	}
	if on {
		pc, err := remote.NewPrometheus(remote.PrometheusGateConfig{Address: p.Address, Addresses: s.addrs, Timeout: durationOf(p.Timeout), Logger: s.log})
		if err != nil {
			return nil, err
		}
		gates = append(gates, &builtInGates{cfg: cfg, prom: pc, now: s.now, errs: map[string]int{}})
	}
	if len(gates) == 1 {
		return gates[0], nil
	}
	return Gates(gates...), nil
}

func durationOf(d *v1alpha1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}
