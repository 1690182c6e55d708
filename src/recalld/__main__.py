"""`python -m recalld` runs the command-line interface."""

from recalld.launcher import main

if __name__ == "__main__":
    main()
