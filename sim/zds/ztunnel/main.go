// Command ztunnel is the stand-in ztunnel of sim/cluster's real node, not
// shipped: it speaks ZDS with the real istio-cni (sim/zds), opening
// ztunnel's in-pod listeners in each ambient pod's network namespace it is
// handed, and answers its readiness on :15021/healthz/ready once connected
// and synced, as ztunnel does. Named ztunnel so that the node agent finds it
// by its process name. Static Go, so its image is FROM scratch.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodewise/nodewise/sim/zds"
)

func main() {
	socket := flag.String("zds-socket", zds.DefaultSocket, "istio-cni's ZDS socket")
	ready := flag.String("ready-addr", ":15021", "address of the readiness endpoint (/healthz/ready)")
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println("ztunnel stand-in (ZDS)")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	z := &zds.Ztunnel{Socket: *socket, Log: log.New(os.Stderr, "", log.LstdFlags)}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !z.Ready() {
			http.Error(w, "not connected to istio-cni, or its snapshot not received", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("/pods", func(w http.ResponseWriter, _ *http.Request) {
		for _, p := range z.Pods() {
			fmt.Fprintln(w, p)
		}
	})
	srv := &http.Server{Addr: *ready, Handler: mux}
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			log.Fatalf("readiness endpoint: %v", err)
		}
	}()
	if err := z.Run(ctx); err != nil {
		log.Fatal(err)
	}
	srv.Close()
}
