"""One generic registry type: name -> object, for one kind of thing (lm-eval's
``lm_eval/api/registry.py`` pattern). Implementations, specs, seeded faults, detectors and
adapters each keep one; the error for an unknown name lists the known ones."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class RegistryError(RuntimeError):
    pass


class Registry(Generic[T]):
    def __init__(self, kind: str, *, on_first_use: Callable[[], object] | None = None) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._on_first_use = on_first_use

    def add(self, name: str, obj: T, *, replace: bool = False) -> T:
        if name in self._items and not replace:
            raise RegistryError(f"{self.kind} {name!r} is registered twice; pick another name "
                                "or pass replace=True")
        self._items[name] = obj
        return obj

    def register(self, name: str, *, replace: bool = False) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""
        def decorator(obj: T) -> T:
            return self.add(name, obj, replace=replace)
        return decorator

    def copy(self) -> "Registry[T]":
        """A registry of the same kind holding the same objects (tests register into a copy)."""
        new: Registry[T] = Registry(self.kind, on_first_use=self._on_first_use)
        new._items = dict(self._items)
        return new

    def remove(self, name: str) -> None:
        self._items.pop(name, None)

    def _loaded(self) -> dict[str, T]:
        if self._on_first_use is not None:
            self._on_first_use()
        return self._items

    def get(self, name: str) -> T:
        items = self._loaded()
        if name not in items:
            raise KeyError(f"no {self.kind} named {name!r}; known: "
                           f"{', '.join(sorted(items)) or 'none'}")
        return items[name]

    def __contains__(self, name: object) -> bool:
        return name in self._loaded()

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._loaded()))

    def __len__(self) -> int:
        return len(self._loaded())

    def items(self) -> list[tuple[str, T]]:
        return list(self._loaded().items())

    def names(self) -> list[str]:
        return list(self._loaded())
