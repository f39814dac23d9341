"""``python -m verifiers.cli`` runs the ``vf`` command (useful where the console script is not on PATH)."""

from verifiers.cli.main import main

main()
