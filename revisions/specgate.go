package revisions

import (
	"context"
	"errors"
	"sync"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/gatespec"
)

// SpecGates gates each wave with the Prometheus gate its RevisionMigration's
// spec.gates describes, and with readiness alone when it describes none. The
// gate of a migration is built once and kept, so its count of consecutive
// query errors survives from one wave check to the next. addrs are the hosts
// spec.gates.prometheus may query; a refused one fails the wave, unqueried.
func SpecGates(addrs health.AddressPolicy, log *zap.Logger) Gate {
	return &specGates{addrs: addrs, log: log, byMigration: map[string]Gate{}}
}

type specGates struct {
	addrs       health.AddressPolicy
	log         *zap.Logger
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
		pg, err := gatespec.Prometheus(*in.Spec, s.addrs, s.log)
		if errors.Is(err, health.ErrAddressRefused) {
			s.mu.Unlock()
			return health.Verdict{Outcome: health.Fail, Reasons: []string{err.Error()}}, nil
		}
		if err != nil {
			s.mu.Unlock()
			return health.Verdict{}, err
		}
		g = ExternalGates(pg)
		s.byMigration[in.Migration] = g
	}
	s.mu.Unlock()
	return g.Judge(ctx, in)
}
