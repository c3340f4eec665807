"""The error a shipped kernel raises on arguments that break its op's contract."""


class ContractError(ValueError):
    """A call that breaks an op's argument contract (../shared/spec/ops.md); raised by the
    shipped kernels with a message naming the argument and the fix."""


def require(cond: bool, msg, section: int) -> None:
    """Raises ContractError with ``msg`` and the contract's section of ../shared/spec/ops.md when
    ``cond`` is false. ``msg`` may be a callable that builds the message: the shipped kernels
    check their arguments on every call, and formatting shapes into messages that are never shown
    cost their hot path."""
    if not cond:
        raise ContractError(f"{msg() if callable(msg) else msg} (contract: ../shared/spec/ops.md "
                            f"section {section})")
