package model

import "k8s.io/apimachinery/pkg/labels"

func LabelSet(m map[string]string) labels.Set { return labels.Set(m) }
