package orchestrator

import "k8s.io/apimachinery/pkg/labels"

func labelSet(m map[string]string) labels.Set { return labels.Set(m) }
