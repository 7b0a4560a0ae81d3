package revisions

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Client reads and writes RevisionMigrations.
type Client interface {
	List(ctx context.Context) ([]v1alpha1.RevisionMigration, error)
	Get(ctx context.Context, name string) (*v1alpha1.RevisionMigration, error)
	Create(ctx context.Context, rm *v1alpha1.RevisionMigration) (*v1alpha1.RevisionMigration, error)
	Update(ctx context.Context, rm *v1alpha1.RevisionMigration) (*v1alpha1.RevisionMigration, error)
	UpdateStatus(ctx context.Context, rm *v1alpha1.RevisionMigration) (*v1alpha1.RevisionMigration, error)
	// ListObject and Watch feed the controller's informer.
	ListObject(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.RevisionMigrationList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

type restClient struct{ rc rest.Interface }

// NewClient builds a RevisionMigration client from a REST config.
func NewClient(cfg *rest.Config) (Client, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &v1alpha1.GroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("building RevisionMigration client: %w", err)
	}
	return &restClient{rc: rc}, nil
}

const resource = "revisionmigrations"

func (c *restClient) List(ctx context.Context) ([]v1alpha1.RevisionMigration, error) {
	var l v1alpha1.RevisionMigrationList
	if err := c.rc.Get().Resource(resource).Do(ctx).Into(&l); err != nil {
		return nil, fmt.Errorf("listing RevisionMigrations: %w", err)
	}
	return l.Items, nil
}

func (c *restClient) ListObject(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.RevisionMigrationList, error) {
	out := &v1alpha1.RevisionMigrationList{}
	return out, c.rc.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
}

func (c *restClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rc.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

func (c *restClient) Get(ctx context.Context, name string) (*v1alpha1.RevisionMigration, error) {
	var rm v1alpha1.RevisionMigration
	if err := c.rc.Get().Resource(resource).Name(name).Do(ctx).Into(&rm); err != nil {
		return nil, err
	}
	return &rm, nil
}

func (c *restClient) Create(ctx context.Context, rm *v1alpha1.RevisionMigration) (*v1alpha1.RevisionMigration, error) {
	var out v1alpha1.RevisionMigration
	if err := c.rc.Post().Resource(resource).Body(rm).Do(ctx).Into(&out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *restClient) Update(ctx context.Context, rm *v1alpha1.RevisionMigration) (*v1alpha1.RevisionMigration, error) {
	var out v1alpha1.RevisionMigration
	if err := c.rc.Put().Resource(resource).Name(rm.Name).Body(rm).Do(ctx).Into(&out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *restClient) UpdateStatus(ctx context.Context, rm *v1alpha1.RevisionMigration) (*v1alpha1.RevisionMigration, error) {
	var out v1alpha1.RevisionMigration
	if err := c.rc.Put().Resource(resource).Name(rm.Name).SubResource("status").Body(rm).Do(ctx).Into(&out); err != nil {
		return nil, err
	}
	return &out, nil
}
