"""Accuracy and regression harness for LLM inference kernels (DeepSeek-V4/V3.2 ops)."""

__version__ = "0.1.0"
