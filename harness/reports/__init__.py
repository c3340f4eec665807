"""Reports: the summary and HTML of a run, its tables and plots, merging shards, trends, speed,
and the verdict (exit codes 0 / 1 / 125)."""
