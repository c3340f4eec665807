"""End-to-end GSM8K: server, lm-eval runs per concurrency level, golden baselines, verdicts."""
