// Package dashboard is nodewise's web view: every NodeRollout and
// RevisionMigration with its phase and progress, a rollout's nodes in their
// planned order by wave and zone, one node's judgement with the judge's
// numbers before and after for each pod and, read from the node agents'
// history, its judged windows plotted against its control nodes and the
// probe (HistorySource), a halt's reason with what to do next, a
// migration's waves, and each team's proxy freshness (FreshnessConfig). It is served by `nodewise dashboard` (with
// the user's kubeconfig, actions allowed) and, read-only, by the
// orchestrator behind a chart value.
//
// Every request must name one of the dashboard's own hosts, and, from
// `nodewise dashboard`, carry the session token it printed at start
// (auth.go); the orchestrator's copy listens on its pod's loopback, which
// only kubectl port-forward reaches.
//
// Pages are rendered on the server from one informer per resource, so a
// thousand-node rollout paints without client-side work. A rollout's page
// draws every node as one square of a map (fleet.go) and lists a page of
// the nodes its filter picks. A small embedded script keeps the pages live
// from server-sent events fed by the same informers (one watch per
// resource per process, whatever the number of tabs): a rollout's page
// gets only what changed on it (stream.go), any other page fetches itself
// again. The assets are embedded: the browser fetches nothing from the
// network at run time, and the plots are SVG drawn on the server.
package dashboard
