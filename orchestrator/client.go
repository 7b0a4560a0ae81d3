package orchestrator

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// RolloutClient reads and writes NodeRollouts (cluster-scoped). It is the
// narrow typed client the orchestrator and the CLI share.
type RolloutClient interface {
	Get(ctx context.Context, name string) (*v1alpha1.NodeRollout, error)
	List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.NodeRolloutList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, nr *v1alpha1.NodeRollout, opts metav1.CreateOptions) (*v1alpha1.NodeRollout, error)
	Update(ctx context.Context, nr *v1alpha1.NodeRollout) (*v1alpha1.NodeRollout, error)
	UpdateStatus(ctx context.Context, nr *v1alpha1.NodeRollout) (*v1alpha1.NodeRollout, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte) (*v1alpha1.NodeRollout, error)
	Delete(ctx context.Context, name string) error
}

// Scheme knows the nodewise types.
var Scheme = runtime.NewScheme()

func init() {
	if err := v1alpha1.AddToScheme(Scheme); err != nil {
		panic(err) // static registration; cannot fail at run time
	}
	metav1.AddToGroupVersion(Scheme, metav1.SchemeGroupVersion)
}

type rolloutClient struct{ rc rest.Interface }

// NewRolloutClient builds a RolloutClient from a rest.Config.
func NewRolloutClient(cfg *rest.Config) (RolloutClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &v1alpha1.GroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(Scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("building the NodeRollout client: %w", err)
	}
	return &rolloutClient{rc: rc}, nil
}

const resource = "noderollouts"

func (c *rolloutClient) Get(ctx context.Context, name string) (*v1alpha1.NodeRollout, error) {
	out := &v1alpha1.NodeRollout{}
	return out, c.rc.Get().Resource(resource).Name(name).Do(ctx).Into(out)
}

func (c *rolloutClient) List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.NodeRolloutList, error) {
	out := &v1alpha1.NodeRolloutList{}
	return out, c.rc.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
}

func (c *rolloutClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rc.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

func (c *rolloutClient) Create(ctx context.Context, nr *v1alpha1.NodeRollout, opts metav1.CreateOptions) (*v1alpha1.NodeRollout, error) {
	out := &v1alpha1.NodeRollout{}
	return out, c.rc.Post().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Body(nr).Do(ctx).Into(out)
}

func (c *rolloutClient) Update(ctx context.Context, nr *v1alpha1.NodeRollout) (*v1alpha1.NodeRollout, error) {
	out := &v1alpha1.NodeRollout{}
	return out, c.rc.Put().Resource(resource).Name(nr.Name).Body(nr).Do(ctx).Into(out)
}

func (c *rolloutClient) UpdateStatus(ctx context.Context, nr *v1alpha1.NodeRollout) (*v1alpha1.NodeRollout, error) {
	out := &v1alpha1.NodeRollout{}
	return out, c.rc.Put().Resource(resource).Name(nr.Name).SubResource("status").Body(nr).Do(ctx).Into(out)
}

func (c *rolloutClient) Patch(ctx context.Context, name string, pt types.PatchType, data []byte) (*v1alpha1.NodeRollout, error) {
	out := &v1alpha1.NodeRollout{}
	return out, c.rc.Patch(pt).Resource(resource).Name(name).Body(data).Do(ctx).Into(out)
}

func (c *rolloutClient) Delete(ctx context.Context, name string) error {
	return c.rc.Delete().Resource(resource).Name(name).Do(ctx).Error()
}
