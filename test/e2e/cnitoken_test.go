package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/nodeagent"
	"github.com/nodewise/nodewise/sim/cluster"
)

type admitAll struct{}

func (admitAll) Authenticate(*http.Request) error { return nil }

// TestCNITokenRefusedByTheAPIServer: the agent's token check of istio-cni's
// kubeconfig against the real kube-apiserver, by TokenReview under the
// agent's own ServiceAccount with the chart's RBAC rule (create
// tokenreviews). istio-cni's token the API server issued is accepted (and
// named); the same token with a signature the API server did not make is
// refused, and the check names the kubeconfig; a valid token of another
// ServiceAccount is refused too.
func TestCNITokenRefusedByTheAPIServer(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{Nodes: 1})
	ctx := context.Background()
	ns := metav1.NamespaceDefault
	for _, sa := range []string{"istio-cni", "nodewise-agent", "other"} {
		if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grantTokenReviews(t, c, ns, "nodewise-agent")
	token := func(sa string) string {
		t.Helper()
		tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	asAgent := rest.AnonymousClientConfig(c.Config)
	asAgent.BearerToken = token("nodewise-agent")
	agentKube, err := kubernetes.NewForConfig(asAgent)
	if err != nil {
		t.Fatal(err)
	}
	good := token("istio-cni")
	i := strings.LastIndex(good, ".")
	bad := good[:i+1] + strings.Repeat("A", len(good)-i-1)

	conf := t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "10-ptp.conflist"), []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"istio-cni"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(conf, nodeagent.DefaultCNIKubeconfigName)
	ag, err := nodeagent.New(nodeagent.Config{
		Node: "n1", CNIConfDir: conf, CNIBinDir: t.TempDir(),
		GetCertificate:  func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, nil },
		Authenticator:   admitAll{},
		CNITokenReviews: agentKube.AuthenticationV1().TokenReviews(), CNIServiceAccount: "system:serviceaccount:default:istio-cni",
	})
	if err != nil {
		t.Fatal(err)
	}
	write := func(token string) {
		t.Helper()
		kc := clientcmdapi.NewConfig()
		kc.Clusters["local"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthority: c.Config.CAFile, CertificateAuthorityData: c.Config.CAData}
		kc.AuthInfos["istio-cni"] = &clientcmdapi.AuthInfo{Token: token}
		kc.Contexts["istio-cni-context"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "istio-cni"}
		kc.CurrentContext = "istio-cni-context"
		if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
			t.Fatal(err)
		}
	}
	tokenCheck := func() wire.CNICheck {
		for _, k := range ag.CheckCNI(ctx, "").Checks {
			if k.Check == wire.CNICheckToken {
				return k
			}
		}
		t.Fatal("no token check")
		return wire.CNICheck{}
	}

	write(good)
	if k := tokenCheck(); !k.OK || !strings.Contains(k.Detail, "system:serviceaccount:default:istio-cni") {
		t.Fatalf("the API server's own token: %+v", k)
	}
	write(bad)
	k := tokenCheck()
	if k.OK || k.File != kubeconfig || !strings.Contains(k.Detail, "refused the token") {
		t.Fatalf("a token the API server did not sign: %+v", k)
	}
	t.Logf("refused: %s", k.Detail)
	write(token("other"))
	if k := tokenCheck(); k.OK || !strings.Contains(k.Detail, "authenticates as system:serviceaccount:default:other, not istio-cni's ServiceAccount") {
		t.Fatalf("another ServiceAccount's token: %+v", k)
	}
}

// grantTokenReviews lets ServiceAccount ns/sa create TokenReviews, as the
// chart's ClusterRole nodewise-agent does.
func grantTokenReviews(t *testing.T, c *cluster.Cluster, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	name := "tokenreviews-" + ns + "-" + sa
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
