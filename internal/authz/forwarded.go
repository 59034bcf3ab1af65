package authz

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// A gateway that proxies KServe requests to a model server vouches for
// the client it authenticated with HeaderForwardedClient: the client's id
// and address, signed with a key the gateway and the model server share
// (under `serve -c`, a random key made at start; nobody else has it).
// The model server trusts the header only when the signature verifies:
// such a call is the client's, never the gateway's own, so a listener's
// open writes (loopback, no tokens) do not apply to it, and the audit log
// names the client and its address. A header that does not verify is
// refused (401 invalid_forwarded_client); a loopback process cannot pose
// as the gateway.

// HeaderForwardedClient is the request header in which the gateway vouches
// for a proxied call's client.
const HeaderForwardedClient = "X-Sluice-Forwarded-Client"

// ReasonInvalidForwarded refuses a forwarded-client header that does not
// verify (wrong key, malformed, expired, for another request id) (401).
const ReasonInvalidForwarded = "invalid_forwarded_client"

// ViaGateway is the Principal.Via of a proxied call the gateway vouched
// for and that carries no credential of its own.
const ViaGateway = "gateway"

// forwardedMaxSkew bounds how old (or how far ahead) a signature may be:
// a header copied out of a log is useless for long, and only for its
// request id.
const forwardedMaxSkew = 2 * time.Minute

// maxForwardedBytes bounds the header's value.
const maxForwardedBytes = 1 << 10

// ForwardedKeyBytes is the length of a forwarded-client key.
const ForwardedKeyBytes = 32

// Forwarded is what the gateway vouches for: the client it authenticated
// and that client's network address.
type Forwarded struct {
	Client string
	Addr   string
}

// SignForwarded returns the HeaderForwardedClient value vouching that the
// request with id requestID came from f, at now.
func SignForwarded(key []byte, f Forwarded, requestID string, now time.Time) string {
	body := "v1;" + url.QueryEscape(f.Client) + ";" + url.QueryEscape(f.Addr) + ";" + strconv.FormatInt(now.Unix(), 10)
	return body + ";" + hex.EncodeToString(forwardedMAC(key, body, requestID))
}

func forwardedMAC(key []byte, body, requestID string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	m.Write([]byte{0})
	m.Write([]byte(requestID))
	return m.Sum(nil)
}

// VerifyForwarded checks a HeaderForwardedClient value for the request
// with id requestID at now and returns what it vouches for.
func VerifyForwarded(key []byte, value, requestID string, now time.Time) (Forwarded, error) {
	if len(key) == 0 {
		return Forwarded{}, errors.New("no forwarded-client key configured")
	}
	if len(value) > maxForwardedBytes {
		return Forwarded{}, errors.New("forwarded-client header too long")
	}
	i := strings.LastIndexByte(value, ';')
	if i < 0 {
		return Forwarded{}, errors.New("malformed forwarded-client header")
	}
	body, sigHex := value[:i], value[i+1:]
	sig, err := hex.DecodeString(sigHex)
	if err != nil || !hmac.Equal(sig, forwardedMAC(key, body, requestID)) {
		return Forwarded{}, errors.New("forwarded-client signature does not verify")
	}
	parts := strings.Split(body, ";")
	if len(parts) != 4 || parts[0] != "v1" {
		return Forwarded{}, errors.New("malformed forwarded-client header")
	}
	t, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return Forwarded{}, errors.New("malformed forwarded-client time")
	}
	if d := now.Sub(time.Unix(t, 0)); d > forwardedMaxSkew || d < -forwardedMaxSkew {
		return Forwarded{}, errors.New("forwarded-client header expired")
	}
	client, err1 := url.QueryUnescape(parts[1])
	addr, err2 := url.QueryUnescape(parts[2])
	if err1 != nil || err2 != nil {
		return Forwarded{}, errors.New("malformed forwarded-client header")
	}
	return Forwarded{Client: client, Addr: addr}, nil
}
