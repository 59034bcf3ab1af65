package modelrepo

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// configFile is the model configuration file of a model folder.
const configFile = "config.pbtxt"

// versionNumber parses a version folder name. Names that are not decimal
// numbers, or that start with "0", are not versions (Triton ignores them).
func versionNumber(name string) (int64, bool) {
	if name == "" || name[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(name, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// versionDirs lists the version folders of a model folder, ascending.
func versionDirs(dir string) ([]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var vs []int64
	for _, e := range entries {
		v, ok := versionNumber(e.Name())
		if !ok || !isDir(filepath.Join(dir, e.Name()), e) {
			continue
		}
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs, nil
}

// isDir reports whether a directory entry is a folder, following a
// symbolic link.
func isDir(path string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&fs.ModeSymlink != 0 {
		fi, err := os.Stat(path)
		return err == nil && fi.IsDir()
	}
	return false
}

// ignoredVersionDirs describes, in Triton's words, each folder of a model
// folder that is not a version ("ignore version directory '003' which
// contains leading zeros in its directory name"), so that the log tells
// why a folder that looks like a version does not load. Hidden folders
// are skipped silently.
func ignoredVersionDirs(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !isDir(filepath.Join(dir, name), e) {
			continue
		}
		if _, ok := versionNumber(name); ok {
			continue
		}
		why := "fails to convert to integral number"
		if _, err := strconv.ParseUint(name, 10, 63); err == nil && name[0] == '0' {
			why = "contains leading zeros in its directory name"
		}
		out = append(out, fmt.Sprintf("ignore version directory '%s' which %s", name, why))
	}
	return out
}

// listRepository returns the model folder names of a repository, sorted.
// Hidden entries and plain files are skipped.
func listRepository(repo string) ([]string, error) {
	entries, err := os.ReadDir(repo)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !isDir(filepath.Join(repo, e.Name()), e) {
			continue
		}
		names = append(names, e.Name())
	}
	return names, nil
}

// selectVersions applies a version policy to the versions on disk. missing
// lists versions a specific policy names that do not exist.
func selectVersions(p *inferencepb.ModelVersionPolicy, avail []int64) (selected, missing []int64) {
	switch {
	case p.GetAll() != nil:
		return slices.Clone(avail), nil
	case p.GetSpecific() != nil:
		want := slices.Clone(p.GetSpecific().GetVersions())
		slices.Sort(want)
		want = slices.Compact(want)
		for _, v := range want {
			if _, ok := slices.BinarySearch(avail, v); ok {
				selected = append(selected, v)
			} else {
				missing = append(missing, v)
			}
		}
		return selected, missing
	default:
		n := 1
		if l := p.GetLatest(); l != nil && l.GetNumVersions() > 0 {
			n = int(l.GetNumVersions())
		}
		if n > len(avail) {
			n = len(avail)
		}
		return slices.Clone(avail[len(avail)-n:]), nil
	}
}

// fingerprint identifies the content of a model folder. It hashes every
// file's relative path, size and content, never modification times, so a
// change that keeps the mtime (or that a network filesystem's attribute
// cache hides) still changes it.
type fingerprint struct {
	model    string           // the whole folder
	top      string           // files outside the version folders
	versions map[int64]string // each version folder
}

// Bounds on what one model folder may hold.
const (
	maxFingerprintFiles = 100_000
	maxFingerprintDepth = 16 // also stops loops of symbolic links
)

// fingerprintDir computes the fingerprint of a model folder. Symbolic
// links are followed, so a repository may link model files or version
// folders from elsewhere; special files count by name only.
func fingerprintDir(dir string) (fingerprint, error) {
	w := fpWalker{whole: sha256.New(), top: sha256.New(), vers: map[int64]hash.Hash{}}
	if err := w.walk(dir, "", 0); err != nil {
		return fingerprint{}, fmt.Errorf("fingerprint %s: %w", dir, err)
	}
	fp := fingerprint{
		model:    hex.EncodeToString(w.whole.Sum(nil)),
		top:      hex.EncodeToString(w.top.Sum(nil)),
		versions: map[int64]string{},
	}
	for v, h := range w.vers {
		fp.versions[v] = hex.EncodeToString(h.Sum(nil))
	}
	return fp, nil
}

type fpWalker struct {
	whole, top hash.Hash
	vers       map[int64]hash.Hash
	files      int
}

// walk hashes the folder path (rel inside the model folder), in name
// order.
func (w *fpWalker) walk(path, rel string, depth int) error {
	if depth > maxFingerprintDepth {
		return fmt.Errorf("%s: folders nested more than %d deep", rel, maxFingerprintDepth)
	}
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return err
	}
	for _, e := range entries {
		r := e.Name()
		if rel != "" {
			r = rel + "/" + e.Name()
		}
		p := filepath.Join(path, e.Name())
		fi, err := os.Stat(p) // follows symbolic links
		if err != nil {
			return err
		}
		first, _, _ := strings.Cut(r, "/")
		part := w.top
		if v, ok := versionNumber(first); ok {
			if w.vers[v] == nil {
				w.vers[v] = sha256.New()
			}
			part = w.vers[v]
		}
		var line string
		switch {
		case fi.IsDir():
			line = "d " + r + "\n"
		case fi.Mode().IsRegular():
			if w.files++; w.files > maxFingerprintFiles {
				return fmt.Errorf("more than %d files", maxFingerprintFiles)
			}
			size, sum, err := hashFile(p)
			if err != nil {
				return err
			}
			line = fmt.Sprintf("f %s %d %x\n", r, size, sum)
		default:
			line = "o " + r + "\n" // a FIFO or device: never read it
		}
		w.whole.Write([]byte(line))
		part.Write([]byte(line))
		if fi.IsDir() {
			if err := w.walk(p, r, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// hashFile returns a file's size and sha256.
func hashFile(path string) (int64, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return n, h.Sum(nil), nil
}
