package testkit

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The kubeconfig Secrets PromotionSecrets creates.
const (
	// UpstreamSecret holds the upstream cluster's kubeconfig.
	UpstreamSecret = "staging-kubeconfig"
	// GoneSecret holds the same kubeconfig pointed at a port nothing
	// listens on: an unreachable upstream.
	GoneSecret = "gone-kubeconfig"
)

// PromotionSecrets creates, in namespace of the downstream cluster kube,
// the kubeconfig Secrets (Cluster API's data key "value") that a
// spec.promotion names: UpstreamSecret with the upstream's kubeconfig (the
// file at kubeconfigPath, whose server is host) and GoneSecret.
func PromotionSecrets(t *testing.T, kube kubernetes.Interface, namespace, kubeconfigPath, host string) {
	t.Helper()
	kubeconfig, err := os.ReadFile(kubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	gone := strings.Replace(string(kubeconfig), host, "https://127.0.0.1:1", 1)
	for name, data := range map[string]string{UpstreamSecret: string(kubeconfig), GoneSecret: gone} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Data: map[string][]byte{"value": []byte(data)}}
		if _, err := kube.CoreV1().Secrets(namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
