"""``python -m clearance``: the command-line tool."""

from clearance.cli import main

main()
