package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

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

// readBuildInfo fills the version and commit (stampedVersion) and the ONNX
// Runtime version from the library itself: it loads the library
// FindLibrary finds and asks it. Without one, it says why.
func readBuildInfo(ortLibrary string) buildInfo {
	info, _ := debug.ReadBuildInfo()
	v, commit := stampedVersion(info, Version, Commit)
	bi := buildInfo{Version: v, Commit: commit, Go: runtime.Version()}
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

// defaultVersion is Version when -ldflags does not set it.
const defaultVersion = "0.1.0-dev"

// stampedVersion is the version and commit a binary reports. -ldflags
// (make build) wins; without it, the stamp Go writes into every binary
// built in a module from a VCS checkout: vcs.revision, "-dirty" when
// vcs.modified, and the module version when Go knows one (go install
// of a tagged release).
func stampedVersion(info *debug.BuildInfo, version, commit string) (string, string) {
	if commit != "" {
		return version, commit
	}
	commit = "unknown"
	if info == nil {
		return version, commit
	}
	if version == defaultVersion && info.Main.Version != "" && info.Main.Version != "(devel)" {
		version = strings.TrimPrefix(info.Main.Version, "v")
	}
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && commit != "unknown" {
		commit += "-dirty"
	}
	return version, commit
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
