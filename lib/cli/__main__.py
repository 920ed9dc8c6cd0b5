"""``python -m lib.cli`` runs the ``tubeq`` command."""
from lib.cli.main import main

main()
