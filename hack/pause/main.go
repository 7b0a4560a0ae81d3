// Command pause is the sandbox image of sim/cluster's real node: it holds a
// pod's namespaces and exits on SIGINT or SIGTERM, as Kubernetes' pause does.
// Static Go, so the image is FROM scratch like nodewise's own and needs no
// registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
