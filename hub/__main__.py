"""``python -m hub`` runs the hub CLI."""

from hub.cli import main

main()
