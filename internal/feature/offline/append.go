package offline

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-ml/sluice/internal/feature"
)

// AppendFile writes rows (one value per column, in column order) as a new
// Parquet file in folder, a folder source's directory, and returns the
// file's path. The file is named prefix-<unix nanos of at>-<16 random hex
// digits>.parquet, so concurrent calls never pick the same name. It is
// written to a temporary file in the same folder whose name starts with a
// dot and does not end in .parquet (so folder scans skip it), synced, and
// renamed into place: readers see the whole file or nothing. On failure
// the temporary file is removed and nothing is left in folder.
func AppendFile(ctx context.Context, folder, prefix string, at time.Time, cols []Column, rows [][]feature.Value) (path string, err error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(folder, "."+prefix+"-*.tmp")
	if err != nil {
		return "", fmt.Errorf("create temporary file in %s: %w", folder, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 256<<10)
	w, err := NewWriter(bw, cols)
	if err != nil {
		return "", fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	for i, r := range rows {
		if err := w.Write(r); err != nil {
			return "", fmt.Errorf("write row %d to %s: %w", i, tmp.Name(), err)
		}
	}
	if err := errors.Join(w.Close(), bw.Flush()); err != nil {
		return "", fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { //nolint:gosec // G302: data files are read by other tools, like the generator's
		return "", fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", fmt.Errorf("random file name: %w", err)
	}
	path = filepath.Join(folder, fmt.Sprintf("%s-%d-%s.parquet", prefix, at.UnixNano(), hex.EncodeToString(rnd[:])))
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	// Make the new directory entry durable; the file is already in place,
	// so a failure here is not an error of the append.
	if d, err := os.Open(folder); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return path, nil
}
