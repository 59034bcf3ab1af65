package objstore

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Credentials are what opens one location. Empty fields fall back to each
// cloud's default chain (instance roles, workload identity, the SDKs' own
// configuration files). Use Redact on any text that might echo them.
type Credentials struct {
	// S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
	// AWS_DEFAULT_REGION (or AWS_REGION) and AWS_PROFILE.
	KeyID, SecretKey, SessionToken, Region, Profile string
	// GCS: the service account key file (GOOGLE_APPLICATION_CREDENTIALS).
	GoogleCredentialsFile string
	// Azure: AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY.
	AzureAccount, AzureKey string
}

// secrets returns the values that must never be shown.
func (c Credentials) secrets() []string {
	var out []string
	for _, s := range []string{c.KeyID, c.SecretKey, c.SessionToken, c.AzureKey} {
		if len(s) >= 4 { // shorter values would redact ordinary text
			out = append(out, s)
		}
	}
	return out
}

// CredentialFileEnv names the variable that points at Triton's credential
// file.
const CredentialFileEnv = "TRITON_CLOUD_CREDENTIAL_PATH" //nolint:gosec // G101: the name of a variable, not a credential

// credentialFile is Triton's credential file: per scheme, a map from a
// location prefix ("" matches every location) to that location's
// credentials.
type credentialFile struct {
	GS map[string]string `json:"gs"`
	S3 map[string]struct {
		SecretKey    string `json:"secret_key"`
		KeyID        string `json:"key_id"`
		Region       string `json:"region"`
		SessionToken string `json:"session_token"`
		Profile      string `json:"profile"`
	} `json:"s3"`
	AS map[string]struct {
		AccountStr string `json:"account_str"`
		AccountKey string `json:"account_key"`
	} `json:"as"`
}

// ResolveCredentials returns the credentials for loc. getenv reads the
// environment (os.Getenv when nil). As in Triton, when
// TRITON_CLOUD_CREDENTIAL_PATH names a credential file, the entry whose key
// is the longest prefix of the location wins and the variables are not
// read; a location the file has no entry for uses the variables. Errors
// name the file, never a value from it.
func ResolveCredentials(loc Location, getenv func(string) string) (Credentials, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if path := getenv(CredentialFileEnv); path != "" {
		c, found, err := fromCredentialFile(loc, path)
		if err != nil || found {
			return c, err
		}
	}
	var c Credentials
	switch loc.Scheme {
	case SchemeS3:
		c.KeyID = getenv("AWS_ACCESS_KEY_ID")
		c.SecretKey = getenv("AWS_SECRET_ACCESS_KEY")
		c.SessionToken = getenv("AWS_SESSION_TOKEN")
		c.Region = getenv("AWS_DEFAULT_REGION")
		if c.Region == "" {
			c.Region = getenv("AWS_REGION")
		}
		c.Profile = getenv("AWS_PROFILE")
	case SchemeGCS:
		c.GoogleCredentialsFile = getenv("GOOGLE_APPLICATION_CREDENTIALS")
	case SchemeAzure:
		c.AzureAccount = getenv("AZURE_STORAGE_ACCOUNT")
		c.AzureKey = getenv("AZURE_STORAGE_KEY")
	}
	return c, nil
}

// fromCredentialFile reads the entry for loc from Triton's credential
// file. found is false when the file has no entry that matches.
func fromCredentialFile(loc Location, path string) (Credentials, bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Credentials{}, false, fmt.Errorf("read %s %s: %w", CredentialFileEnv, path, err)
	}
	var f credentialFile
	if err := json.Unmarshal(data, &f); err != nil {
		// The decoder's message can quote the file; say where, not what.
		return Credentials{}, false, fmt.Errorf("%s %s is not a valid credential file (want {\"gs\":{...},\"s3\":{...},\"as\":{...}})", CredentialFileEnv, path)
	}
	uri := loc.String()
	var c Credentials
	switch loc.Scheme {
	case SchemeGCS:
		k, ok := longestPrefix(uri, f.GS)
		if !ok {
			return c, false, nil
		}
		c.GoogleCredentialsFile = f.GS[k]
	case SchemeS3:
		k, ok := longestPrefix(uri, f.S3)
		if !ok {
			return c, false, nil
		}
		e := f.S3[k]
		c.KeyID, c.SecretKey, c.SessionToken, c.Region, c.Profile = e.KeyID, e.SecretKey, e.SessionToken, e.Region, e.Profile
	case SchemeAzure:
		k, ok := longestPrefix(uri, f.AS)
		if !ok {
			return c, false, nil
		}
		e := f.AS[k]
		c.AzureAccount, c.AzureKey = e.AccountStr, e.AccountKey
	}
	return c, true, nil
}

// longestPrefix returns the key of m that is the longest prefix of uri.
func longestPrefix[V any](uri string, m map[string]V) (string, bool) {
	best, found := "", false
	for k := range m {
		if strings.HasPrefix(uri, k) && (!found || len(k) > len(best)) {
			best, found = k, true
		}
	}
	return best, found
}

// Redact replaces every credential value of c found in s with
// "[redacted]".
func (c Credentials) Redact(s string) string {
	for _, v := range c.secrets() {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}

// redactedError hides credential values in an error's text; errors.Is and
// errors.As still see the error it wraps.
type redactedError struct {
	err   error
	creds Credentials
}

func (e *redactedError) Error() string { return e.creds.Redact(e.err.Error()) }
func (e *redactedError) Unwrap() error { return e.err }

// String describes credentials without their values.
func (c Credentials) String() string {
	var parts []string
	if c.KeyID != "" || c.SecretKey != "" {
		parts = append(parts, "s3 key")
	}
	if c.SessionToken != "" {
		parts = append(parts, "s3 session token")
	}
	if c.Profile != "" {
		parts = append(parts, "s3 profile")
	}
	if c.GoogleCredentialsFile != "" {
		parts = append(parts, "google credentials file")
	}
	if c.AzureKey != "" {
		parts = append(parts, "azure shared key")
	}
	if len(parts) == 0 {
		return "default credential chain"
	}
	return strings.Join(parts, ", ")
}
