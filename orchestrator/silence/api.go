package silence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Matcher is one matcher of a silence, as Alertmanager's v2 API writes it.
type Matcher struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	IsRegex bool   `json:"isRegex"`
	IsEqual bool   `json:"isEqual"`
}

// Silence is a silence as the v2 API takes it (POST /api/v2/silences, ID
// set to extend that one) and returns it (State set).
type Silence struct {
	ID        string    `json:"id,omitempty"`
	Matchers  []Matcher `json:"matchers"`
	StartsAt  time.Time `json:"startsAt"`
	EndsAt    time.Time `json:"endsAt"`
	CreatedBy string    `json:"createdBy"`
	Comment   string    `json:"comment"`
	Status    *struct {
		State string `json:"state"` // active, pending, expired
	} `json:"status,omitempty"`
}

// Active says the silence mutes alerts now.
func (s Silence) Active() bool { return s.Status != nil && s.Status.State == "active" }

// errNotFound is Alertmanager's answer for a silence ID it does not hold.
var errNotFound = errors.New("no such silence")

// api is Alertmanager's v2 silences API: three calls and their JSON.
type api struct {
	base      string // the URL, no trailing slash
	tokenFile string
	http      *retryablehttp.Client
}

// post creates s, or extends it when s.ID is set, and returns the ID that
// holds it now (a silence Alertmanager cannot update in place, one whose
// start or matchers changed, is replaced by a new one with a new ID).
func (a *api) post(ctx context.Context, s Silence) (string, error) {
	body, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	var out struct {
		SilenceID string `json:"silenceID"`
	}
	if err := a.do(ctx, http.MethodPost, "/api/v2/silences", body, &out); err != nil {
		return "", err
	}
	if out.SilenceID == "" {
		return "", fmt.Errorf("POST %s/api/v2/silences: no silenceID in the answer", a.base)
	}
	return out.SilenceID, nil
}

// list returns the silences whose matchers the filter matchers match
// (GET /api/v2/silences?filter=...), expired ones too.
func (a *api) list(ctx context.Context, filter []Matcher) ([]Silence, error) {
	q := url.Values{}
	for _, m := range filter {
		q.Add("filter", m.String())
	}
	var out []Silence
	err := a.do(ctx, http.MethodGet, "/api/v2/silences?"+q.Encode(), nil, &out)
	return out, err
}

// get reads the silence id (GET /api/v2/silence/{id}).
func (a *api) get(ctx context.Context, id string) (Silence, error) {
	var out Silence
	err := a.do(ctx, http.MethodGet, "/api/v2/silence/"+url.PathEscape(id), nil, &out)
	return out, err
}

// expire ends the silence id now (DELETE /api/v2/silence/{id}).
func (a *api) expire(ctx context.Context, id string) error {
	return a.do(ctx, http.MethodDelete, "/api/v2/silence/"+url.PathEscape(id), nil, nil)
}

func (a *api) do(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.tokenFile != "" {
		// Read for each request: a projected token rotates.
		tok, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return fmt.Errorf("reading the Alertmanager bearer token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s%s: %w", method, a.base, strings.SplitN(path, "?", 2)[0], err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%s %s%s: reading the answer: %w", method, a.base, path, err)
	}
	if resp.StatusCode/100 != 2 {
		err := fmt.Errorf("%s %s%s: %s: %s", method, a.base, strings.SplitN(path, "?", 2)[0], resp.Status, strings.TrimSpace(string(data[:min(len(data), 200)])))
		if resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w: %w", errNotFound, err)
		}
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s%s: decoding the answer: %w", method, a.base, path, err)
	}
	return nil
}
