"""`python -m vocabsurgeon`: the same CLI as the `vocabsurgeon` command."""

from .cli.commands import main

main()
