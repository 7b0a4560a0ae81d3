// Package revtag reads and writes Istio revision tags the way istioctl does:
// a tag is a MutatingWebhookConfiguration named istio-revision-tag-<tag>,
// labelled istio.io/tag=<tag> and istio.io/rev=<revision>, whose webhooks are
// derived from the revision's own injector webhook (istio-sidecar-injector-<rev>).
// When the revision has an istiod Service, the tag also gets the
// istiod-revision-tag-<tag> Service istioctl creates, so istioctl sees the same
// tags nodewise does and the other way round. It also removes revisions, but
// only once no proxy runs them.
package revtag
