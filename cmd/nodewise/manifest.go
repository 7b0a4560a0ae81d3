package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// maxManifestBytes bounds what -f reads: a NodeRollout is a few KiB, and
// `-f /dev/zero` must fail, not fill the memory.
const maxManifestBytes = 8 << 20

// readManifest reads the one object of a YAML or JSON file (- is stdin) and
// returns it as JSON. Empty documents are skipped; a second object is refused,
// so nothing in the file is silently ignored.
func readManifest(stdin io.Reader, path string) ([]byte, error) {
	name, r := path, stdin
	if path == "-" {
		name = "stdin"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, errors.Unwrap(err))
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("reading %s: larger than %d MiB; a NodeRollout manifest is a few KiB", name, maxManifestBytes>>20)
	}
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("malformed manifest %s: %s", name, flatten(err.Error()))
	}
	switch len(docs) {
	case 0:
		return nil, fmt.Errorf("%s holds no object: want one NodeRollout", name)
	case 1:
		doc, err := yaml.YAMLToJSONStrict(docs[0]) // strict: a key given twice is an error
		if err != nil {
			return nil, fmt.Errorf("malformed manifest %s: %s", name, flatten(err.Error()))
		}
		return doc, nil
	default:
		return nil, fmt.Errorf("%s holds %d objects: nodewise reads one NodeRollout per file (split it, one file per rollout)", name, len(docs))
	}
}

// flatten folds a multi-line message into one line.
func flatten(s string) string { return strings.Join(strings.Fields(s), " ") }

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// splitDocuments returns the raw non-empty documents of a YAML stream (---
// separated) or a JSON stream (concatenated objects), as apimachinery's
// decoders split them. They stay raw so a strict parse still sees a key
// given twice.
func splitDocuments(data []byte) ([][]byte, error) {
	var docs [][]byte
	if _, _, isJSON := utilyaml.GuessJSONStream(bytes.NewReader(data), 4096); isJSON {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var doc json.RawMessage
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				return docs, nil
			} else if err != nil {
				return nil, err
			}
			docs = append(docs, doc)
		}
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, err
		}
		if v != nil { // not an empty document between two ---
			docs = append(docs, doc)
		}
	}
}
