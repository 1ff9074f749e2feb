"""`python -m vocabsurgeon`: the same CLI as the `vocabsurgeon` command."""

from .cli import main

main()
