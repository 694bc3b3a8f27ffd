"""The exceptions the library raises.

```text
STMError
 ├── InvalidInput       (also a ValueError): a value a person chose is refused; the message is
 │                      written for them (a server setting, a category)
 ├── ConfigError        (also a ValueError): a setting is invalid
 ├── StoreError         the database could not be opened or used
 │    ├── NoDatabase           there is no database where the settings point (none made)
 │    ├── SchemaVersionError   the file was written by a newer version
 │    └── RejectedWriteError   the store can never apply this operation
 └── DurabilityError    background work could not be made durable
```
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DurabilityError",
    "InvalidInput",
    "NoDatabase",
    "RejectedWriteError",
    "STMError",
    "SchemaVersionError",
    "StoreError",
]


class STMError(Exception):
    """Base class of every error raised by the library."""


class InvalidInput(STMError, ValueError):
    """A value a person chose was refused; the message says why in words they can act on."""


class ConfigError(STMError, ValueError):
    """A configuration value is invalid; the message names the environment variable."""


class StoreError(STMError):
    """The durable store could not be opened or used."""


class NoDatabase(StoreError):
    """There is no short-term memory database where the settings point (none was made)."""


class SchemaVersionError(StoreError):
    """The database was written by a newer version of this library."""


class RejectedWriteError(StoreError):
    """The store can never apply this operation (a value out of range, text it cannot
    encode, a constraint that cannot hold); it was dropped, and what was queued behind
    it went ahead. ``what`` names the operation and its scope keys."""

    def __init__(self, what: str, cause: BaseException) -> None:
        self.what = what
        super().__init__(f"short-term memory cannot store {what}: {cause}")


class DurabilityError(STMError):
    """Background writes, deletes or other changes could not be made durable.

    ``failures`` lists one line per operation that is still pending; the
    library keeps retrying them until ``close()``. A change other processes must
    honour (a delete, a message deleted or edited on Discord, a server's removal
    or return, settings, an opt-out) that cannot be committed is saved in the
    pending-change journal and applied at the next open; ``at_risk`` names the
    changes that could not be saved there either, which a restart before they are
    committed would lose (empty: every pending change survives a restart).
    """

    def __init__(self, failures: list[str], at_risk: list[str] | None = None) -> None:
        self.failures = list(failures)
        self.at_risk = list(at_risk or ())
        message = "short-term memory could not make this durable: " + "; ".join(self.failures)
        if self.at_risk:
            message += (
                "; not saved for a restart either (the pending-change journal cannot be "
                "written): " + "; ".join(self.at_risk)
            )
        super().__init__(message)
