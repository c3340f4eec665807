"""The errors of a contract: the caller's (bad arguments, :mod:`kernels.runtime.errors`, which the
shipped kernels raise) and the implementation's (bad outputs), and what counts as out of memory."""

from kernels.runtime.errors import ContractError, require  # noqa: F401


class ContractViolation(AssertionError):
    """An implementation broke the op's output contract (count, shape, dtype)."""


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
