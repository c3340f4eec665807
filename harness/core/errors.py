"""The errors of a contract: the caller's (bad arguments) and the implementation's (bad outputs)."""


class ContractError(ValueError):
    """A call that breaks an op's argument contract (../shared/spec/ops.md); raised by the
    shipped kernels with a message naming the argument and the fix."""


class ContractViolation(AssertionError):
    """An implementation broke the op's output contract (count, shape, dtype)."""
