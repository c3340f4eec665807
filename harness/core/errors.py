"""The errors of a contract: the caller's (bad arguments) and the implementation's (bad outputs)."""


class ContractError(ValueError):
    """A call that breaks an op's argument contract (../shared/spec/ops.md); raised by the
    shipped kernels with a message naming the argument and the fix."""


class ContractViolation(AssertionError):
    """An implementation broke the op's output contract (count, shape, dtype)."""


def require(cond: bool, msg, section: int) -> None:
    """Raises ContractError with ``msg`` and the contract's section of ../shared/spec/ops.md when
    ``cond`` is false. ``msg`` may be a callable that builds the message: the shipped kernels
    check their arguments on every call, and formatting shapes into messages that are never shown
    cost their hot path."""
    if not cond:
        raise ContractError(f"{msg() if callable(msg) else msg} (contract: ../shared/spec/ops.md "
                            f"section {section})")


OUT_OF_MEMORY_ERRORS: list[type[BaseException]] = []
"""Exception classes, beyond torch's, that mean a device ran out of memory: an adapter whose
vendor raises its own type adds it with :func:`register_out_of_memory_error`. Out of memory is
decided by an exception's class, never by its text (a RuntimeError that merely says "out of
memory" is the implementation's failure like any other)."""


def register_out_of_memory_error(cls: type[BaseException]) -> type[BaseException]:
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        raise TypeError(f"register_out_of_memory_error wants an exception class, got {cls!r}")
    if cls not in OUT_OF_MEMORY_ERRORS:
        OUT_OF_MEMORY_ERRORS.append(cls)
    return cls


def out_of_memory_errors() -> tuple[type[BaseException], ...]:
    """The classes that mean out of memory: torch's (``torch.OutOfMemoryError``, which
    ``torch.cuda.OutOfMemoryError`` names too) and those registered."""
    import torch

    found = [torch.OutOfMemoryError, getattr(torch.cuda, "OutOfMemoryError", torch.OutOfMemoryError)]
    return tuple(dict.fromkeys(found + OUT_OF_MEMORY_ERRORS))


def is_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, out_of_memory_errors())
