"""``python -m privaudit``: the same command-line interface as the ``privaudit`` script."""

from privaudit.cli import main

if __name__ == "__main__":
    main(prog_name="privaudit")
