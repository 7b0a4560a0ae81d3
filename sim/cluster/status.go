package cluster

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProcessStatus is one component and whether it still runs.
type ProcessStatus struct {
	Name    string
	PID     int
	Running bool
}

// Status is what `nodewise sim status` reports.
type Status struct {
	Processes         []ProcessStatus
	Nodes, ReadyNodes int
	Pods, RunningPods int
	APIError          error
}

// Healthy is true when every component runs and every node is Ready.
func (s Status) Healthy() bool {
	for _, p := range s.Processes {
		if !p.Running {
			return false
		}
	}
	return s.APIError == nil && s.ReadyNodes == s.Nodes
}

// Status reads the processes and what the API server says of nodes and pods.
func (c *Cluster) Status(ctx context.Context) Status {
	var st Status
	for _, p := range c.state.Processes {
		st.Processes = append(st.Processes, ProcessStatus{Name: p.Name, PID: p.PID, Running: p.alive()})
	}
	st.Nodes = len(c.state.Nodes)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		st.APIError = err
		return st
	}
	st.ReadyNodes = readyNodes(nodes.Items)
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		st.APIError = err
		return st
	}
	st.Pods = len(pods.Items)
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			st.RunningPods++
		}
	}
	return st
}
