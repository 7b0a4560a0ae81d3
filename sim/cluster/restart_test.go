package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Killing the kube-apiserver with SIGKILL and starting it again loses no
// object, and a client's watch (an informer, as every controller uses)
// resumes and delivers what was created before, during and after.
func TestAPIServerRestartKeepsObjectsAndWatch(t *testing.T) {
	c := Start(t, Options{Nodes: 2})
	ctx := testContext(t, 3*time.Minute)
	createNamespace(t, ctx, c.Client, "watched")
	cms := c.Client.CoreV1().ConfigMaps("watched")
	create := func(i int) {
		t.Helper()
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating cm-%03d: %v", i, err)
		}
	}
	for i := 0; i < 10; i++ {
		create(i)
	}
	var mu sync.Mutex
	added := map[string]bool{}
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace("watched"))
	inf := factory.Core().V1().ConfigMaps().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		mu.Lock()
		added[obj.(*corev1.ConfigMap).Name] = true
		mu.Unlock()
	}}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	for i := 10; i < 15; i++ {
		create(i)
	}
	oldPID := c.state.process("kube-apiserver").PID
	if err := c.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if newPID := c.state.process("kube-apiserver").PID; newPID == oldPID {
		t.Fatalf("kube-apiserver PID unchanged (%d): it was not restarted", oldPID)
	}
	for i := 15; i < 20; i++ {
		create(i)
	}
	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for i := 0; i < 20; i++ {
			if name := fmt.Sprintf("cm-%03d", i); !added[name] {
				out = append(out, name)
			}
		}
		return out
	}
	for deadline := time.Now().Add(90 * time.Second); len(missing()) > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if m := missing(); len(m) > 0 {
		t.Fatalf("the watching client never saw %v after the restart", m)
	}
	after, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, cm := range after.Items {
		names[cm.Name] = true
	}
	for i := 0; i < 20; i++ {
		if name := fmt.Sprintf("cm-%03d", i); !names[name] {
			t.Errorf("after the restart the API server lost %s", name)
		}
	}
}
