// Command probe is the nodewise probe: flags → probe.Config → Run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/buildinfo"
	"github.com/nodewise/nodewise/probe"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "probe: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg probe.Config
	var service string
	port := fs.Int("port", 15080, "TCP port served to the other probes")
	fs.StringVar(&service, "peers", "nodewise-probe.nodewise-probe.svc", "headless Service whose addresses are the other probes")
	fs.Float64Var(&cfg.Rate, "rate", 20, "short requests a second to the other probes, one connection each")
	fs.IntVar(&cfg.Streams, "streams", 4, "long-lived streams held open to the other probes")
	fs.DurationVar(&cfg.StreamEvery, "stream-every", 0, "how often a stream exchanges a line (default 5s)")
	self := fs.String("pod-ip", os.Getenv("POD_IP"), "this probe's pod IP, left out of its peers (default $POD_IP)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w (flags: -port -peers -rate -streams -stream-every -pod-ip -version)", err)
	}
	if *showVersion {
		fmt.Println("probe", buildinfo.Version())
		return nil
	}
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	cfg.Listen = ":" + strconv.Itoa(*port)
	cfg.Peers = probe.DNSPeers(service, *port)
	if *self != "" {
		cfg.Self = net.JoinHostPort(*self, strconv.Itoa(*port))
	}
	cfg.Logger = log
	p, err := probe.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("probe running", zap.String("listen", cfg.Listen), zap.String("peers", service), zap.Float64("rate", cfg.Rate), zap.Int("streams", cfg.Streams))
	return p.Run(ctx)
}
