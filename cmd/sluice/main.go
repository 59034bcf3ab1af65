// Command sluice runs the Sluice inference platform: the model server, the
// feature server and the gateway, alone or together. See `sluice --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-ml/sluice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
