"""The operator's command line: ``python -m stm`` (installed as ``discord-stm``).

Reads (``stats``, ``show``, ``export``, ``check``, ``janitor --dry-run``) open the
database read-only and never create or migrate it. Purges and the janitor go through
``ShortTermMemory``, so they have the library's semantics (shared summaries a purged
user contributed to are dropped too, the file is rewritten so no copy of the text
survives), and are reported done only once ``flush()`` says they are durable.

``commands`` holds the commands, ``access`` how they reach the database, ``view`` what
they print.
"""

from ._commands import cli, main

__all__ = ["cli", "main"]
