"""``python -m stm``: the operator's command line (see ``stm/cli/``)."""

from .cli import main

main(prog_name="python -m stm")
