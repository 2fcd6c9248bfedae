"""``python -m fred``: the ``fred`` command, where no console script is installed."""

from fred.tools.cli import entry

if __name__ == "__main__":
    entry()
