"""The ``vf`` command line (typer + rich).

``main.py`` defines the app and only the thin command signatures; each command imports its
implementation module when it runs, so ``vf --help`` and ``vf --version`` stay fast.
"""
