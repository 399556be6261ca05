"""CLI verbs, one module per product area (see ``ctr_volcano.app.cli.main.COMMAND_MODULES``)."""
