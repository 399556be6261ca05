"""CLI verbs, one module per product area (see ``ctr_volcano.cli.COMMAND_MODULES``)."""
