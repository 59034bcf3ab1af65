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
	return testHook(lookup, logger, backlogDelaySchedulerEnv, "requests", "every sequence batcher holds its requests until enough wait in its backlog")
}

// testHook reads one of Triton's test-hook environment variables: a count
// (of requests, of seconds: unit) of 0 or more, 0 when unset. A hook that
// is set is logged as a warning saying what it does: it exists for tests.
func testHook(lookup func(string) (string, bool), logger *slog.Logger, env, unit, does string) (int, error) {
	v, ok := lookup(env)
	if !ok || v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a number of %s, 0 or more", env, v, unit)
	}
	if n > 0 {
		logger.Warn("test hook enabled", "env", env, unit, n, "effect", does)
	}
	return n, nil
}
