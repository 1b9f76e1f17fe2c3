"""`python -m tether`: the same as the `tether` command."""

from .cli.main import main

if __name__ == "__main__":
    main()
