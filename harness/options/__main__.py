"""``python -m harness.options``: which option exists on which command (docs/usage.md)."""

from harness.options import markdown_table

print(markdown_table())
