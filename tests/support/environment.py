"""A workload's settings handed to Airflow's processes through their environment, and read back there."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any, ClassVar, TypeVar

T = TypeVar("T", bound="FromEnvironment")


class FromEnvironment:
    """A dataclass of ``str``, ``int`` and ``float`` settings that travel as ``<PREFIX><NAME>`` variables."""

    PREFIX: ClassVar[str]

    def environment(self) -> dict[str, str]:
        """The settings for Airflow's processes, which build the same workload with :meth:`from_environment`."""
        return {self.PREFIX + name.upper(): str(value) for name, value in asdict(self).items()}  # type: ignore[call-overload]

    @classmethod
    def from_environment(cls: type[T], env: Mapping[str, str] = os.environ) -> T:
        values: dict[str, Any] = {}
        for spec in fields(cls):  # type: ignore[arg-type]
            raw = env.get(cls.PREFIX + spec.name.upper())
            if raw is not None:
                values[spec.name] = raw if spec.type == "str" else (float(raw) if spec.type == "float" else int(raw))
        return cls(**values)
