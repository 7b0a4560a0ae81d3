package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Formats of the webhook body.
const (
	FormatSlack   = "slack"   // {"text": "..."}: Slack incoming webhooks, Mattermost, Rocket.Chat, Google Chat
	FormatGeneric = "generic" // the Event as JSON
)

// Source lists NodeRollouts (v1alpha1.NodeRolloutInterface does).
type Source interface {
	List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.NodeRolloutList, error)
}

// MigrationSource lists RevisionMigrations (v1alpha1.RevisionMigrationInterface does).
type MigrationSource interface {
	List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.RevisionMigrationList, error)
}

// Config configures the notifier.
type Config struct {
	Source Source // required
	// Migrations, when set, adds RevisionMigrations' halts and successes.
	Migrations MigrationSource
	// Cluster is the cluster's name, in every message (required).
	Cluster string
	URL     string // the webhook (required, http or https)
	Format  string // FormatSlack (default) or FormatGeneric
	// DashboardURL is the address people open the dashboard at (nodewise
	// dashboard, or its Service behind a proxy): each message links the
	// page of its node, rollout or migration there. Empty: no links.
	DashboardURL string
	// Every is how often the rollouts are looked at (default 5s).
	Every time.Duration
	// Timeout bounds each attempt (default 10s); RetryMax attempts follow
	// (default 4) with backoff between 1s and 30s.
	Timeout  time.Duration
	RetryMax int
	Logger   *zap.Logger
	Now      func() time.Time

	retryWaitMin, retryWaitMax time.Duration // tests shorten the backoff
}

// Notifier sends an Event for every change it sees.
type Notifier struct {
	cfg  Config
	http *retryablehttp.Client
}

// New validates cfg and fills its defaults.
func New(cfg Config) (*Notifier, error) {
	if cfg.Source == nil {
		return nil, errors.New("notify.Config.Source is required")
	}
	if cfg.Cluster == "" {
		return nil, errors.New("notify: the cluster's name is required: every message names its cluster")
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("notify: webhook URL %q: want an http:// or https:// URL", redact(cfg.URL))
	}
	if cfg.DashboardURL != "" {
		if d, err := url.Parse(cfg.DashboardURL); err != nil || (d.Scheme != "http" && d.Scheme != "https") || d.Host == "" {
			return nil, fmt.Errorf("notify: dashboard URL %q: want an http:// or https:// URL", cfg.DashboardURL)
		}
	}
	switch cfg.Format {
	case "":
		cfg.Format = FormatSlack
	case FormatSlack, FormatGeneric:
	default:
		return nil, fmt.Errorf("notify: format %q: want %s or %s", cfg.Format, FormatSlack, FormatGeneric)
	}
	if cfg.Every == 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 4
	}
	if cfg.retryWaitMin == 0 {
		cfg.retryWaitMin, cfg.retryWaitMax = time.Second, 30*time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := retryablehttp.NewClient()
	c.HTTPClient.Timeout = cfg.Timeout
	c.RetryMax, c.RetryWaitMin, c.RetryWaitMax = cfg.RetryMax, cfg.retryWaitMin, cfg.retryWaitMax
	c.Logger = nil
	c.ErrorHandler = retryablehttp.PassthroughErrorHandler
	return &Notifier{cfg: cfg, http: c}, nil
}

// redact keeps a webhook's secret path out of errors and logs.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable)"
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// Run looks at the rollouts every Every until ctx ends. What is already
// halted or completed at the first look is not announced again (a restarted
// or new leader does not repeat it); a failed send is logged and not retried
// past the client's own retries.
func (n *Notifier) Run(ctx context.Context) error {
	var prev map[string]view
	var prevMig map[string]v1alpha1.MigrationPhase
	t := time.NewTicker(n.cfg.Every)
	defer t.Stop()
	for {
		list, err := n.cfg.Source.List(ctx, metav1.ListOptions{})
		switch {
		case err != nil && ctx.Err() == nil:
			n.cfg.Logger.Warn("listing NodeRollouts for notifications", zap.Error(err))
		case err == nil:
			if prev != nil {
				n.sendAll(ctx, changes(prev, list.Items, n.cfg.Now()))
			}
			prev = map[string]view{}
			for i := range list.Items {
				prev[list.Items[i].Name] = viewOf(&list.Items[i])
			}
		}
		if n.cfg.Migrations != nil {
			migs, err := n.cfg.Migrations.List(ctx, metav1.ListOptions{})
			switch {
			case err != nil && ctx.Err() == nil:
				n.cfg.Logger.Warn("listing RevisionMigrations for notifications", zap.Error(err))
			case err == nil:
				if prevMig != nil {
					n.sendAll(ctx, migrationChanges(prevMig, migs.Items, n.cfg.Now()))
				}
				prevMig = map[string]v1alpha1.MigrationPhase{}
				for _, rm := range migs.Items {
					prevMig[rm.Name] = rm.Status.Phase
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sendAll sends each event, logging (not retrying further) what fails.
func (n *Notifier) sendAll(ctx context.Context, events []Event) {
	for _, e := range events {
		if err := n.Send(ctx, e); err != nil && ctx.Err() == nil {
			n.cfg.Logger.Warn("notification not delivered", zap.String("kind", string(e.Kind)), zap.String("rollout", e.Rollout), zap.String("migration", e.Migration), zap.Error(err))
		}
	}
}

// Body is the webhook body of e in the configured format, naming the
// cluster and linking e's page on the dashboard (Config.DashboardURL).
func (n *Notifier) Body(e Event) ([]byte, error) {
	e.Cluster = n.cfg.Cluster
	if n.cfg.DashboardURL != "" {
		link, err := url.JoinPath(n.cfg.DashboardURL, e.page()...)
		if err != nil {
			return nil, fmt.Errorf("linking the dashboard: %w", err)
		}
		e.Link = link
	}
	if n.cfg.Format == FormatGeneric {
		return json.Marshal(e)
	}
	return json.Marshal(map[string]string{"text": e.Text()})
}

// Send posts one event, retrying refused or failed attempts.
func (n *Notifier) Send(ctx context.Context, e Event) error { return n.SendTo(ctx, "", e) }

// SendTo posts one event to a route of its own (a team's webhook, http or
// https), in the configured format; "" is the configured webhook.
func (n *Notifier) SendTo(ctx context.Context, route string, e Event) error {
	target := n.cfg.URL
	if route != "" {
		u, err := url.Parse(route)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("notify: route %q: want an http:// or https:// URL", redact(route))
		}
		target = route
	}
	body, err := n.Body(e)
	if err != nil {
		return err
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building the request to %s: %w", redact(target), err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.http.Do(req)
	if err != nil {
		return fmt.Errorf("posting to %s: %w", redact(target), err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("posting to %s: %s", redact(target), resp.Status)
	}
	n.cfg.Logger.Info("notified", zap.String("kind", string(e.Kind)), zap.String("rollout", e.Rollout), zap.String("migration", e.Migration), zap.Strings("nodes", e.Nodes))
	return nil
}
