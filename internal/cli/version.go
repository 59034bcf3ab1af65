package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/sluice-ml/sluice/internal/backend/onnxruntime"
)

// Commit is the source commit, set at build time with -ldflags
// "-X github.com/sluice-ml/sluice/internal/cli.Commit=..." (make build does);
// without it, the VCS stamp Go writes into the binary is used.
var Commit = ""

// buildInfo is what "sluice version" reports.
type buildInfo struct {
	Version, Commit, Go, ONNXRuntime string
}

// readBuildInfo fills the version and commit from -ldflags, else the
// commit from the VCS stamp Go writes into the binary (vcs.revision,
// "-dirty" for a modified tree), and the ONNX Runtime version from the library itself: it loads
// the library FindLibrary finds and asks it. Without one, it says why.
func readBuildInfo(ortLibrary string) buildInfo {
	bi := buildInfo{Version: Version, Commit: "unknown", Go: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok && Commit == "" {
		modified := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				bi.Commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && bi.Commit != "unknown" {
			bi.Commit += "-dirty"
		}
	}
	if Commit != "" {
		bi.Commit = Commit
	}
	lib, err := onnxruntime.FindLibrary(ortLibrary)
	if err != nil {
		bi.ONNXRuntime = "not loaded (" + err.Error() + ")"
		return bi
	}
	b, err := onnxruntime.New(onnxruntime.Options{LibraryPath: lib}, nil)
	if err != nil {
		bi.ONNXRuntime = "not loaded (" + err.Error() + ")"
		return bi
	}
	bi.ONNXRuntime = b.LoadedVersion() + " (" + lib + ")"
	_ = b.Close() // best effort: the process ends next
	return bi
}

func (bi buildInfo) write(w io.Writer) {
	fmt.Fprintf(w, "sluice %s\n  commit        %s\n  go            %s\n  onnxruntime   %s\n", bi.Version, bi.Commit, bi.Go, bi.ONNXRuntime)
}

// newVersionCmd returns "sluice version".
func newVersionCmd() *cobra.Command {
	var lib string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the Sluice version, its commit, and the Go and ONNX Runtime versions",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			readBuildInfo(lib).write(cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&lib, "onnxruntime-library", "", "libonnxruntime.so.1 to ask for its version (default: where the model server finds it)")
	return cmd
}
