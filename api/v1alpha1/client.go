package v1alpha1

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
)

// Scheme knows both nodewise kinds (and the meta types their lists and
// watches carry). It is the one scheme the typed client decodes with.
var Scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		panic(err) // static registration: cannot fail at run time
	}
	metav1.AddToGroupVersion(s, metav1.SchemeGroupVersion)
	return s
}

// NodeRolloutInterface reads and writes NodeRollouts (cluster-scoped), with
// the methods client-gen would generate.
// +kubebuilder:object:generate=false
type NodeRolloutInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*NodeRollout, error)
	List(ctx context.Context, opts metav1.ListOptions) (*NodeRolloutList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, nr *NodeRollout, opts metav1.CreateOptions) (*NodeRollout, error)
	Update(ctx context.Context, nr *NodeRollout, opts metav1.UpdateOptions) (*NodeRollout, error)
	UpdateStatus(ctx context.Context, nr *NodeRollout, opts metav1.UpdateOptions) (*NodeRollout, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*NodeRollout, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// RevisionMigrationInterface reads and writes RevisionMigrations
// (cluster-scoped), with the methods client-gen would generate.
// +kubebuilder:object:generate=false
type RevisionMigrationInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*RevisionMigration, error)
	List(ctx context.Context, opts metav1.ListOptions) (*RevisionMigrationList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, rm *RevisionMigration, opts metav1.CreateOptions) (*RevisionMigration, error)
	Update(ctx context.Context, rm *RevisionMigration, opts metav1.UpdateOptions) (*RevisionMigration, error)
	UpdateStatus(ctx context.Context, rm *RevisionMigration, opts metav1.UpdateOptions) (*RevisionMigration, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*RevisionMigration, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// PodAgePolicyInterface reads and writes PodAgePolicies (cluster-scoped),
// with the methods client-gen would generate.
// +kubebuilder:object:generate=false
type PodAgePolicyInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*PodAgePolicy, error)
	List(ctx context.Context, opts metav1.ListOptions) (*PodAgePolicyList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, p *PodAgePolicy, opts metav1.CreateOptions) (*PodAgePolicy, error)
	Update(ctx context.Context, p *PodAgePolicy, opts metav1.UpdateOptions) (*PodAgePolicy, error)
	UpdateStatus(ctx context.Context, p *PodAgePolicy, opts metav1.UpdateOptions) (*PodAgePolicy, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*PodAgePolicy, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Client is the typed client of the nodewise.io/v1alpha1 group: one REST
// client, one Scheme, a typed accessor per resource.
// +kubebuilder:object:generate=false
type Client struct{ rc rest.Interface }

// NewForConfig builds the typed client from a REST config.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &GroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(Scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("building the %s client: %w", GroupVersion, err)
	}
	return &Client{rc: rc}, nil
}

// NodeRollouts is the NodeRollout resource.
func (c *Client) NodeRollouts() NodeRolloutInterface {
	return gentype.NewClientWithList[*NodeRollout, *NodeRolloutList]("noderollouts", c.rc, metav1.ParameterCodec, "",
		func() *NodeRollout { return &NodeRollout{} }, func() *NodeRolloutList { return &NodeRolloutList{} })
}

// RevisionMigrations is the RevisionMigration resource.
func (c *Client) RevisionMigrations() RevisionMigrationInterface {
	return gentype.NewClientWithList[*RevisionMigration, *RevisionMigrationList]("revisionmigrations", c.rc, metav1.ParameterCodec, "",
		func() *RevisionMigration { return &RevisionMigration{} }, func() *RevisionMigrationList { return &RevisionMigrationList{} })
}

// PodAgePolicies is the PodAgePolicy resource.
func (c *Client) PodAgePolicies() PodAgePolicyInterface {
	return gentype.NewClientWithList[*PodAgePolicy, *PodAgePolicyList]("podagepolicies", c.rc, metav1.ParameterCodec, "",
		func() *PodAgePolicy { return &PodAgePolicy{} }, func() *PodAgePolicyList { return &PodAgePolicyList{} })
}
