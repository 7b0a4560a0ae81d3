package demo

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// waitList follows lw's objects (of obj's type) until done says they are
// as wanted, for at most timeout. done sees every object of the list after
// each change; while false, its string says what is still waited for, and
// the error on timeout carries the last one.
func waitList(ctx context.Context, timeout time.Duration, lw cache.ListerWatcher, obj runtime.Object, done func(objs []any) (bool, string)) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var store cache.Store
	last := "nothing seen yet"
	check := func() (bool, error) {
		ok, why := done(store.List())
		last = why
		return ok, nil
	}
	_, err := watchtools.UntilWithSync(wctx, lw, obj,
		func(s cache.Store) (bool, error) { store = s; return check() },
		func(watch.Event) (bool, error) { return check() })
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if wctx.Err() != nil {
			return fmt.Errorf("not within %s (%s)", timeout, last)
		}
		return err
	}
	return nil
}
