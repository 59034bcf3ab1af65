package modelrepo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluice-ml/sluice/internal/modelconfig"
)

// File names inside model and version folders.
const (
	provenanceFile = "model_config.json"
	manifestFile   = "SHA256SUMS"
	pinFile        = "expected_git_commit"
)

// maxSmallFile bounds the provenance, manifest and pin files we read.
const maxSmallFile = 1 << 20

// provenance is what a version folder's model_config.json says about where
// the model came from. Both fields are optional.
type provenance struct {
	Version   string `json:"version"`    // a label such as "2.1.0-a1b2c3d"
	GitCommit string `json:"git_commit"` // the commit the model was built from
}

// parseProvenance decodes model_config.json. Unknown keys are allowed (the
// file may carry more metadata); syntax and type errors are problems at
// the line and column where they occur.
func parseProvenance(file string, data []byte) (provenance, error) {
	var p provenance
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&p); err != nil {
		return provenance{}, jsonProblem(file, data, dec.InputOffset(), err)
	}
	if dec.More() {
		return provenance{}, problemAt(file, data, int(dec.InputOffset()), "unexpected data after the JSON object")
	}
	return p, nil
}

// jsonProblem places a JSON decoding error at its line and column.
func jsonProblem(file string, data []byte, fallback int64, err error) error {
	off := fallback
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	msg := err.Error()
	switch {
	case errors.As(err, &syn):
		off = syn.Offset
	case errors.As(err, &typ):
		off = typ.Offset
		if typ.Field != "" {
			msg = fmt.Sprintf("%s must be a %s, not a JSON %s", typ.Field, typ.Type, typ.Value)
		}
	}
	msg = strings.TrimPrefix(msg, "json: ")
	return problemAt(file, data, int(off), msg)
}

// problemAt builds a problem at a byte offset of data.
func problemAt(file string, data []byte, off int, msg string) modelconfig.Error {
	if off > len(data) {
		off = len(data)
	}
	if off < 0 {
		off = 0
	}
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(data[:off], '\n')
	return modelconfig.Error{Pos: modelconfig.Position{File: file, Line: line, Col: col}, Msg: msg}
}

// readProvenance reads a version folder's model_config.json; a missing
// file is an empty provenance.
func readProvenance(vdir string) (provenance, error) {
	path := filepath.Join(vdir, provenanceFile)
	data, err := readSmall(path)
	if errors.Is(err, fs.ErrNotExist) {
		return provenance{}, nil
	}
	if err != nil {
		return provenance{}, err
	}
	return parseProvenance(path, data)
}

// readSmall reads a file of at most maxSmallFile bytes.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, maxSmallFile+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if b.Len() > maxSmallFile {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, maxSmallFile)
	}
	return b.Bytes(), nil
}

// readPin returns the commit in a model folder's expected_git_commit, or
// "" when there is none.
func readPin(modelDir string) (string, error) {
	if modelDir == "" {
		return "", nil
	}
	data, err := readSmall(filepath.Join(modelDir, pinFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// commitMatches reports whether a version's commit is the expected one.
// Either may be abbreviated (at least 7 hex digits, as git prints them).
func commitMatches(expected, actual string) bool {
	e, a := strings.ToLower(strings.TrimSpace(expected)), strings.ToLower(strings.TrimSpace(actual))
	switch {
	case e == "":
		return true
	case a == "":
		return false
	case e == a:
		return true
	case len(e) >= 7 && strings.HasPrefix(a, e):
		return true
	default:
		return len(a) >= 7 && strings.HasPrefix(e, a)
	}
}

// manifestEntry is one line of a SHA256SUMS manifest.
type manifestEntry struct {
	Sum  [sha256.Size]byte
	File string // slash-separated, relative to the version folder
	Line int
}

// parseManifest decodes a SHA256SUMS file in sha256sum's format
// ("<64 hex digits>  <file>", or " *<file>" for binary mode). Blank lines
// are skipped. File names must stay inside the version folder. Every
// malformed line is a problem.
func parseManifest(file string, data []byte) ([]manifestEntry, modelconfig.Errors) {
	var entries []manifestEntry
	var ps modelconfig.Errors
	bad := func(line int, format string, args ...any) {
		ps = append(ps, modelconfig.Error{
			Pos: modelconfig.Position{File: file, Line: line, Col: 1},
			Msg: fmt.Sprintf(format, args...),
		})
	}
	for i, raw := range strings.Split(string(data), "\n") {
		line := i + 1
		text := strings.TrimSuffix(raw, "\r")
		if strings.TrimSpace(text) == "" {
			continue
		}
		if len(text) < 67 || text[64] != ' ' || (text[65] != ' ' && text[65] != '*') {
			bad(line, "malformed line: want \"<sha256>  <file>\"")
			continue
		}
		sum, err := hex.DecodeString(text[:64])
		if err != nil {
			bad(line, "malformed sha256 %q", text[:64])
			continue
		}
		name := text[66:]
		if !filepath.IsLocal(filepath.FromSlash(name)) || strings.Contains(name, "\\") {
			bad(line, "file %q is outside the version folder", name)
			continue
		}
		e := manifestEntry{File: name, Line: line}
		copy(e.Sum[:], sum)
		entries = append(entries, e)
	}
	return entries, ps
}

// verifyManifest checks a version folder against its SHA256SUMS, if it has
// one. It returns every problem found: malformed lines (cause
// manifest_invalid) and missing or changed files (cause checksum_mismatch).
func verifyManifest(vdir string) (cause string, ps modelconfig.Errors) {
	path := filepath.Join(vdir, manifestFile)
	data, err := readSmall(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return causeManifest, modelconfig.Errors{{Pos: modelconfig.Position{File: path}, Msg: err.Error()}}
	}
	entries, ps := parseManifest(path, data)
	if len(ps) > 0 {
		cause = causeManifest
	}
	for _, e := range entries {
		pos := modelconfig.Position{File: path, Line: e.Line, Col: 67}
		_, sum, err := hashFile(filepath.Join(vdir, filepath.FromSlash(e.File)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			ps = append(ps, modelconfig.Error{Pos: pos, Msg: fmt.Sprintf("checksum mismatch: file '%s' is missing", e.File)})
		case err != nil:
			ps = append(ps, modelconfig.Error{Pos: pos, Msg: fmt.Sprintf("checksum of '%s': %v", e.File, err)})
		case !bytes.Equal(sum, e.Sum[:]):
			ps = append(ps, modelconfig.Error{Pos: pos, Msg: fmt.Sprintf("checksum mismatch: file '%s' has sha256 %x, the manifest says %x", e.File, sum, e.Sum)})
		default:
			continue
		}
		cause = causeChecksum
	}
	return cause, ps
}
