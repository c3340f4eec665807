"""Saved cases: the case file format, saving failing cases during a run, and replaying them."""
