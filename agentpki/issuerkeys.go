package agentpki

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
)

// issuerKeys are the ServiceAccount token issuer's public keys, as the API
// server publishes them (/openid/v1/jwks, readable by every ServiceAccount
// through the default system:service-account-issuer-discovery binding).
// With them the Reviewer tells a token the API server signed from a forged
// one before it spends a TokenReview. They are read when first needed and
// again, at most every keysRefresh, when a token names a key not among them
// (the issuer's keys rotated).
type issuerKeys struct {
	kube kubernetes.Interface

	mu      sync.Mutex
	keys    map[string]crypto.PublicKey // by key ID
	fetched time.Time                   // the last read, whatever its outcome
}

const keysRefresh = 30 * time.Second

// key is the issuer's key kid (ok false: not known, or the keys cannot be
// read; the caller then decides as without them).
func (k *issuerKeys) key(ctx context.Context, kid string, now time.Time) (crypto.PublicKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if pk, ok := k.keys[kid]; ok {
		return pk, true
	}
	if !k.fetched.IsZero() && now.Sub(k.fetched) < keysRefresh {
		return nil, false
	}
	k.fetched = now
	keys, err := k.fetch(ctx)
	if err != nil {
		return nil, false // keeps the keys it had: a failed read is no rotation
	}
	k.keys = keys
	pk, ok := k.keys[kid]
	return pk, ok
}

func (k *issuerKeys) fetch(ctx context.Context) (map[string]crypto.PublicKey, error) {
	if k.kube == nil || k.kube.Discovery() == nil || k.kube.Discovery().RESTClient() == nil {
		return nil, errors.New("no API client for the issuer's keys")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := k.kube.Discovery().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the ServiceAccount issuer's keys: %w", err)
	}
	var set struct {
		Keys []struct {
			Kid, Kty, Crv, N, E, X, Y string
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("the ServiceAccount issuer's keys: %w", err)
	}
	keys := map[string]crypto.PublicKey{}
	b64 := base64.RawURLEncoding.DecodeString
	for _, jk := range set.Keys {
		switch jk.Kty {
		case "RSA":
			n, err1 := b64(jk.N)
			e, err2 := b64(jk.E)
			if err1 != nil || err2 != nil || len(e) > 4 {
				continue
			}
			keys[jk.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		case "EC":
			curve := map[string]elliptic.Curve{"P-256": elliptic.P256(), "P-384": elliptic.P384(), "P-521": elliptic.P521()}[jk.Crv]
			x, err1 := b64(jk.X)
			y, err2 := b64(jk.Y)
			if curve == nil || err1 != nil || err2 != nil {
				continue
			}
			keys[jk.Kid] = &ecdsa.PublicKey{Curve: curve, X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
		}
	}
	return keys, nil
}

// tokenClaims are the claims of a ServiceAccount token the Reviewer reads.
type tokenClaims struct {
	Sub string   `json:"sub"`
	Aud audience `json:"aud"`
	Exp int64    `json:"exp"`
	Nbf int64    `json:"nbf"`
}

// audience is a JWT's aud: one string or several.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = audience{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(a))
}

// signed says how tok stands against the issuer's keys: a JWT signed by one
// of them (its claims returned), one naming a key it has whose signature is
// wrong (forged), or neither (not a JWT, or a key it does not know: another
// issuer, or the keys cannot be read).
type signed int

const (
	signedUnknown signed = iota
	signedGood
	signedForged
)

func (k *issuerKeys) check(ctx context.Context, tok string, now time.Time) (signed, tokenClaims) {
	var c tokenClaims
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return signedUnknown, c
	}
	var hdr struct{ Alg, Kid string }
	h, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	p, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	sig, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || json.Unmarshal(h, &hdr) != nil || json.Unmarshal(p, &c) != nil {
		return signedUnknown, c
	}
	pk, ok := k.key(ctx, hdr.Kid, now)
	if !ok {
		return signedUnknown, c
	}
	if !verifyJWS(hdr.Alg, pk, parts[0]+"."+parts[1], sig) {
		return signedForged, c
	}
	return signedGood, c
}

// verifyJWS checks a JWS signature (RS256/384/512, ES256/384/512: what the
// API server signs ServiceAccount tokens with).
func verifyJWS(alg string, pk crypto.PublicKey, signingInput string, sig []byte) bool {
	var h hash.Hash
	var ch crypto.Hash
	switch alg[min(len(alg), 2):] {
	case "256":
		h, ch = sha256.New(), crypto.SHA256
	case "384":
		h, ch = sha512.New384(), crypto.SHA384
	case "512":
		h, ch = sha512.New(), crypto.SHA512
	default:
		return false
	}
	h.Write([]byte(signingInput))
	digest := h.Sum(nil)
	switch key := pk.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") && rsa.VerifyPKCS1v15(key, ch, digest, sig) == nil
	case *ecdsa.PublicKey:
		size := (key.Curve.Params().BitSize + 7) / 8
		if !strings.HasPrefix(alg, "ES") || len(sig) != 2*size {
			return false
		}
		r, s := new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:])
		return ecdsa.Verify(key, digest, r, s)
	}
	return false
}

// valid says the claims are current at now (a minute of leeway for clocks).
func (c tokenClaims) valid(now time.Time) bool {
	const leeway = 60
	t := now.Unix()
	return (c.Exp == 0 || t < c.Exp+leeway) && (c.Nbf == 0 || t+leeway >= c.Nbf)
}

func (c tokenClaims) hasAudience(aud string) bool { return slices.Contains(c.Aud, aud) }
