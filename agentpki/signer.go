package agentpki

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// SignerConfig configures the orchestrator's side: the CA and the signer of
// the agents' certificate requests.
type SignerConfig struct {
	Kube      kubernetes.Interface // required
	Namespace string               // where the CA Secret and bundle ConfigMap live (required)
	// AgentUser is the only requester approved: the agent DaemonSet's
	// ServiceAccount (default system:serviceaccount:<Namespace>:nodewise-agent).
	AgentUser string
	// CAValidity is the CA's life (default 1 year); it is rotated with a third left.
	CAValidity time.Duration
	// CertValidity is each agent certificate's life (default 7 days), capped
	// by the CA's; agents renew at 70 to 90% of it (client-go's certificate manager).
	CertValidity time.Duration
	// Every is how often Run checks the CA (rotation, the published bundle)
	// and retries requests it could not decide (default 1m). Requests are
	// handled as the watch shows them, not on this clock.
	Every  time.Duration
	Logger *zap.Logger
	Now    func() time.Time // default time.Now
}

// Signer keeps the agents' CA and signs their requests. Run it on every
// orchestrator replica: writes are conflict-safe, so two replicas never issue
// twice for one request, and each keeps its Pool fresh.
type Signer struct {
	cfg  SignerConfig
	pool atomic.Pointer[x509.CertPool]
	ca   atomic.Pointer[ca]
}

// NewSigner validates cfg and fills its defaults.
func NewSigner(cfg SignerConfig) (*Signer, error) {
	if cfg.Kube == nil || cfg.Namespace == "" {
		return nil, errors.New("agentpki.SignerConfig: Kube and Namespace are required")
	}
	if cfg.AgentUser == "" {
		cfg.AgentUser = "system:serviceaccount:" + cfg.Namespace + ":nodewise-agent"
	}
	if cfg.CAValidity == 0 {
		cfg.CAValidity = 365 * 24 * time.Hour
	}
	if cfg.CertValidity == 0 {
		cfg.CertValidity = 7 * 24 * time.Hour
	}
	if cfg.CAValidity < time.Hour || cfg.CertValidity < 10*time.Minute {
		return nil, fmt.Errorf("agentpki.SignerConfig: CAValidity %s must be at least 1h and CertValidity %s at least 10m", cfg.CAValidity, cfg.CertValidity)
	}
	if cfg.CertValidity > cfg.CAValidity/3 {
		return nil, fmt.Errorf("agentpki.SignerConfig: CertValidity %s must be at most a third of CAValidity %s, so certificates renew onto a rotated CA before the old one expires", cfg.CertValidity, cfg.CAValidity)
	}
	if cfg.Every == 0 {
		cfg.Every = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Signer{cfg: cfg}, nil
}

// Pool is the CA bundle the agents' certificates verify against; nil until
// Run has loaded the CA (a client then fails closed).
func (s *Signer) Pool() *x509.CertPool { return s.pool.Load() }

// retryAfter is how soon Run tries again after a round that failed.
const retryAfter = 2 * time.Second

// Run keeps the CA and signs requests until ctx ends. It watches the
// requests of SignerName (a cache of them, not a list every round) and runs
// a round when one is added or changes, and every Every; a failed round is
// logged and retried after retryAfter. Run returns nil on cancellation.
func (s *Signer) Run(ctx context.Context) error {
	log := s.cfg.Logger
	f := informers.NewSharedInformerFactoryWithOptions(s.cfg.Kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = signerSelector()
	}))
	inf := f.Certificates().V1().CertificateSigningRequests().Informer()
	// A refused list or watch (RBAC) leaves requests undecided: say so, as
	// the failed list of each round used to.
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, io.EOF) {
			return // the watch ended; the reflector watches again
		}
		log.Warn("agent certificates: watching the requests failed; retrying", zap.Error(err))
	}); err != nil {
		return fmt.Errorf("watching the agents' certificate requests: %w", err)
	}
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
	}); err != nil {
		return fmt.Errorf("watching the agents' certificate requests: %w", err)
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	for {
		var csrs []*certv1.CertificateSigningRequest
		for _, o := range inf.GetStore().List() {
			csrs = append(csrs, o.(*certv1.CertificateSigningRequest))
		}
		wait := s.cfg.Every
		if err := s.round(ctx, csrs); err != nil && ctx.Err() == nil {
			log.Warn("agent certificates: round failed; retrying", zap.Error(err))
			wait = min(wait, retryAfter)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		case <-kick:
			t.Stop()
		}
	}
}

// Once is one round over the requests as listed from the API now.
func (s *Signer) Once(ctx context.Context) error {
	list, err := s.cfg.Kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: signerSelector()})
	if err != nil {
		return fmt.Errorf("listing the agents' certificate requests: %w", err)
	}
	csrs := make([]*certv1.CertificateSigningRequest, len(list.Items))
	for i := range list.Items {
		csrs[i] = &list.Items[i]
	}
	return s.round(ctx, csrs)
}

func signerSelector() string {
	return fields.OneTermEqualSelector("spec.signerName", SignerName).String()
}

// round ensures the CA (creating or rotating it) and handles every pending
// request among csrs, which it does not modify.
func (s *Signer) round(ctx context.Context, csrs []*certv1.CertificateSigningRequest) error {
	c, err := s.ensureCA(ctx)
	if err != nil {
		return err
	}
	s.ca.Store(c)
	s.pool.Store(c.pool())
	if err := s.publishBundle(ctx, c); err != nil {
		return err
	}
	var errs []error
	for _, csr := range csrs {
		if err := s.handle(ctx, c, csr); err != nil {
			errs = append(errs, fmt.Errorf("certificate request %s: %w", csr.Name, err))
		}
	}
	return errors.Join(errs...)
}

// ensureCA reads the CA Secret, creating it on first use and rotating it
// when due; a conflict with another replica reads the winner's.
func (s *Signer) ensureCA(ctx context.Context) (*ca, error) {
	secrets := s.cfg.Kube.CoreV1().Secrets(s.cfg.Namespace)
	now := s.cfg.Now()
	sec, err := secrets.Get(ctx, CASecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c, err := newCA(now, s.cfg.CAValidity)
		if err != nil {
			return nil, err
		}
		data, err := c.secretData()
		if err != nil {
			return nil, err
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: CASecretName, Namespace: s.cfg.Namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "nodewise"}},
			Type:       corev1.SecretTypeTLS, Data: data,
		}
		if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err == nil {
			s.cfg.Logger.Info("created the node agents' CA", zap.String("secret", s.cfg.Namespace+"/"+CASecretName), zap.Time("notAfter", c.cert.NotAfter))
			return c, nil
		} else if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating Secret %s/%s: %w", s.cfg.Namespace, CASecretName, err)
		}
		sec, err = secrets.Get(ctx, CASecretName, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", s.cfg.Namespace, CASecretName, err)
	}
	c, err := caFromSecret(sec.Data)
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w (delete it to start a new CA; agents then renew)", s.cfg.Namespace, CASecretName, err)
	}
	if !c.dueForRotation(now) {
		return c, nil
	}
	next, err := c.rotated(now, s.cfg.CAValidity)
	if err != nil {
		return nil, err
	}
	data, err := next.secretData()
	if err != nil {
		return nil, err
	}
	upd := sec.DeepCopy()
	upd.Data = data
	if _, err := secrets.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return c, nil // another replica rotated it; the next round reads theirs
		}
		return nil, fmt.Errorf("rotating Secret %s/%s: %w", s.cfg.Namespace, CASecretName, err)
	}
	s.cfg.Logger.Info("rotated the node agents' CA; the old one stays trusted until it expires",
		zap.Time("oldNotAfter", c.cert.NotAfter), zap.Time("newNotAfter", next.cert.NotAfter))
	return next, nil
}

// publishBundle keeps ConfigMap nodewise-agent-ca-bundle equal to the bundle.
func (s *Signer) publishBundle(ctx context.Context, c *ca) error {
	cms := s.cfg.Kube.CoreV1().ConfigMaps(s.cfg.Namespace)
	want := string(c.bundlePEM())
	cm, err := cms.Get(ctx, BundleConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: BundleConfigMapName, Namespace: s.cfg.Namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "nodewise"}},
			Data:       map[string]string{keyBundle: want},
		}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ConfigMap %s/%s: %w", s.cfg.Namespace, BundleConfigMapName, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading ConfigMap %s/%s: %w", s.cfg.Namespace, BundleConfigMapName, err)
	}
	if cm.Data[keyBundle] == want {
		return nil
	}
	upd := cm.DeepCopy()
	if upd.Data == nil {
		upd.Data = map[string]string{}
	}
	upd.Data[keyBundle] = want
	if _, err := cms.Update(ctx, upd, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("updating ConfigMap %s/%s: %w", s.cfg.Namespace, BundleConfigMapName, err)
	}
	return nil
}

func condition(csr *certv1.CertificateSigningRequest, t certv1.RequestConditionType) bool {
	return slices.ContainsFunc(csr.Status.Conditions, func(c certv1.CertificateSigningRequestCondition) bool { return c.Type == t })
}

// handle approves or denies a pending request, then signs an approved one.
func (s *Signer) handle(ctx context.Context, c *ca, csr *certv1.CertificateSigningRequest) error {
	if condition(csr, certv1.CertificateDenied) || condition(csr, certv1.CertificateFailed) || len(csr.Status.Certificate) > 0 {
		return nil
	}
	csrs := s.cfg.Kube.CertificatesV1().CertificateSigningRequests()
	req, node, verr := s.check(ctx, csr)
	if te := (transientError{}); errors.As(verr, &te) {
		return verr // decide on the next round, never deny on an API hiccup
	}
	if !condition(csr, certv1.CertificateApproved) {
		upd := csr.DeepCopy()
		cond := certv1.CertificateSigningRequestCondition{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue,
			Reason: "NodewiseAgentOwnNode", Message: "the agent of node " + node + " asked for its own name and addresses", LastUpdateTime: metav1.Now()}
		if verr != nil {
			cond = certv1.CertificateSigningRequestCondition{Type: certv1.CertificateDenied, Status: corev1.ConditionTrue,
				Reason: "NodewiseAgentCheckFailed", Message: verr.Error(), LastUpdateTime: metav1.Now()}
		}
		upd.Status.Conditions = append(upd.Status.Conditions, cond)
		got, err := csrs.UpdateApproval(ctx, csr.Name, upd, metav1.UpdateOptions{})
		if err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return nil // another replica decided; the next round sees it
			}
			return fmt.Errorf("recording the decision: %w", err)
		}
		if verr != nil {
			s.cfg.Logger.Warn("denied an agent certificate request", zap.String("csr", csr.Name), zap.String("user", csr.Spec.Username), zap.Error(verr))
			return nil
		}
		csr = got
	}
	if verr != nil {
		// Approved by someone else, but not something we sign.
		return s.fail(ctx, csr, verr)
	}
	certPEM, err := c.sign(req, s.cfg.Now(), s.lifeFor(csr))
	if err != nil {
		return err
	}
	upd := csr.DeepCopy()
	upd.Status.Certificate = certPEM
	if _, err := csrs.UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("issuing: %w", err)
	}
	s.cfg.Logger.Info("issued an agent serving certificate", zap.String("csr", csr.Name), zap.String("node", node))
	return nil
}

func (s *Signer) fail(ctx context.Context, csr *certv1.CertificateSigningRequest, why error) error {
	upd := csr.DeepCopy()
	upd.Status.Conditions = append(upd.Status.Conditions, certv1.CertificateSigningRequestCondition{Type: certv1.CertificateFailed,
		Status: corev1.ConditionTrue, Reason: "NodewiseAgentCheckFailed", Message: why.Error(), LastUpdateTime: metav1.Now()})
	if _, err := s.cfg.Kube.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("marking it failed: %w", err)
	}
	return nil
}

// lifeFor is CertValidity, or the request's shorter expirationSeconds.
func (s *Signer) lifeFor(csr *certv1.CertificateSigningRequest) time.Duration {
	life := s.cfg.CertValidity
	if e := csr.Spec.ExpirationSeconds; e != nil {
		if d := time.Duration(*e) * time.Second; d < life {
			life = max(d, 10*time.Minute)
		}
	}
	return life
}

// check is the whole policy: the agent ServiceAccount, from a token bound
// to a pod on node N, asking for a server certificate naming only N and N's
// addresses. It returns the parsed request and N.
func (s *Signer) check(ctx context.Context, csr *certv1.CertificateSigningRequest) (*x509.CertificateRequest, string, error) {
	if csr.Spec.Username != s.cfg.AgentUser {
		return nil, "", fmt.Errorf("requested by %q, not the agent ServiceAccount %q", csr.Spec.Username, s.cfg.AgentUser)
	}
	nodes := csr.Spec.Extra[NodeNameExtra]
	if len(nodes) != 1 || nodes[0] == "" {
		return nil, "", fmt.Errorf("the requester's token is not bound to a pod on a node (no %s): only the agent pod's own ServiceAccount token is accepted", NodeNameExtra)
	}
	node := nodes[0]
	blk, _ := pem.Decode(csr.Spec.Request)
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, node, errors.New("spec.request holds no PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, node, fmt.Errorf("parsing the request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, node, fmt.Errorf("the request's signature: %w", err)
	}
	if want := "nodewise-agent:" + node; req.Subject.CommonName != want {
		return nil, node, fmt.Errorf("common name %q, want %q", req.Subject.CommonName, want)
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return nil, node, errors.New("email or URI names are not issued")
	}
	if len(req.DNSNames) != 1 || req.DNSNames[0] != node {
		return nil, node, fmt.Errorf("DNS names %q: want exactly the node's name %q, which the orchestrator verifies", req.DNSNames, node)
	}
	for _, u := range csr.Spec.Usages {
		if u != certv1.UsageServerAuth && u != certv1.UsageDigitalSignature && u != certv1.UsageKeyEncipherment {
			return nil, node, fmt.Errorf("usage %q: only server auth, digital signature and key encipherment are issued", u)
		}
	}
	if !slices.Contains(csr.Spec.Usages, certv1.UsageServerAuth) {
		return nil, node, errors.New("usages lack server auth")
	}
	if len(req.IPAddresses) == 0 {
		return nil, node, errors.New("no IP address: the orchestrator dials the agent at its node's InternalIP")
	}
	n, err := s.cfg.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, node, fmt.Errorf("node %s does not exist", node)
	}
	if err != nil {
		return nil, node, transientError{fmt.Errorf("reading node %s: %w", node, err)}
	}
	// The address is where the agent is found, not who it is: the node
	// writes its own addresses, so the orchestrator verifies the node's
	// name in the certificate (remote.AgentConfig.VerifyNodeName).
	// Only InternalIPs, the address the orchestrator dials.
	for _, ip := range req.IPAddresses {
		if !slices.ContainsFunc(n.Status.Addresses, func(a corev1.NodeAddress) bool {
			return a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).Equal(ip)
		}) {
			return nil, node, fmt.Errorf("IP %s is not an InternalIP of node %s", ip, node)
		}
	}
	return req, node, nil
}

// transientError is a check that could not be made (the API failed), as
// opposed to one that failed.
type transientError struct{ error }

func (e transientError) Unwrap() error { return e.error }
