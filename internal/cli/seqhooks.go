package cli

import (
	"fmt"
	"log/slog"
	"strconv"
)

// backlogDelaySchedulerEnv is Triton's second sequence-batcher test hook:
// with TRITONSERVER_DELAY_SCHEDULER it also holds every sequence batcher
// until that many requests of sequences waiting for a slot (the backlog)
// are queued (qa/L0_sequence_batcher test.sh sets both per case).
const backlogDelaySchedulerEnv = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"

// backlogDelaySchedulerHook reads backlogDelaySchedulerEnv: the number of
// backlogged requests each sequence batcher waits for; 0 when unset.
func backlogDelaySchedulerHook(lookup func(string) (string, bool), logger *slog.Logger) (int, error) {
	v, ok := lookup(backlogDelaySchedulerEnv)
	if !ok || v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a number of requests, 0 or more", backlogDelaySchedulerEnv, v)
	}
	if n > 0 {
		logger.Warn("test hook: every sequence batcher holds its requests until enough wait in its backlog", "env", backlogDelaySchedulerEnv, "requests", n)
	}
	return n, nil
}
