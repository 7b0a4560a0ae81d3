package main

import (
	"context"
	"errors"
	"os"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/buildinfo"
	"github.com/nodewise/nodewise/leader"
	"github.com/nodewise/nodewise/notify"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/podage"
)

// notifyFlags turn on the webhook notifier (package notify).
type notifyFlags struct {
	webhook, format, cluster, dashboard string
}

// notifyLease is the notifier's own Lease, so one replica sends each message.
const notifyLease = "nodewise-notify"

// webhookEnv carries the webhook URL (a secret: the chart fills it from a Secret).
const webhookEnv = "NODEWISE_NOTIFY_WEBHOOK"

func (f *notifyFlags) defaultWebhook() string { return os.Getenv(webhookEnv) }

// notifier is the task that sends halts, completions and canary verdicts to
// the webhook while holding its Lease; nil without a webhook.
func notifier(f notifyFlags, kube kubernetes.Interface, cfg orchestrator.Config) (task, error) {
	if f.webhook == "" {
		return nil, nil
	}
	client, err := v1alpha1.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	if f.cluster == "" {
		return nil, errors.New("--notify-cluster is required with a webhook: every message names its cluster")
	}
	n, err := notify.New(notify.Config{Source: client.NodeRollouts(), Migrations: client.RevisionMigrations(), Cluster: f.cluster,
		URL: f.webhook, Format: f.format, DashboardURL: f.dashboard, Logger: cfg.Logger.Named("notify")})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return leader.Run(ctx, leader.Election{
			Client: kube, Namespace: cfg.Namespace, Name: notifyLease, Identity: cfg.Identity,
			LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod, Log: cfg.Logger,
			Version: buildinfo.Version(), Address: cfg.Address,
		}, n.Run)
	}, nil
}

// noticeSender is what sends a PodAgePolicy's notices: the webhook notifier
// (a team's route overrides its URL); nil without a webhook, and then no
// policy restarts anything, since no notice can go out.
func noticeSender(f notifyFlags, log *zap.Logger) (podage.Notifier, error) {
	if f.webhook == "" {
		return nil, nil
	}
	if f.cluster == "" {
		return nil, errors.New("--notify-cluster is required with a webhook: every message names its cluster")
	}
	n, err := notify.New(notify.Config{Source: noRollouts{}, Cluster: f.cluster, URL: f.webhook, Format: f.format,
		DashboardURL: f.dashboard, Logger: log.Named("notices")})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// noRollouts is the notice sender's Source: it sends, it never watches.
type noRollouts struct{}

func (noRollouts) List(context.Context, metav1.ListOptions) (*v1alpha1.NodeRolloutList, error) {
	return &v1alpha1.NodeRolloutList{}, nil
}
