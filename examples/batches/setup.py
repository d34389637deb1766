"""Create the worked example's SQLite source and warehouse (see
:mod:`jobserver.demo.warehouse`, which ``make run``'s demo uses too):

    .venv/bin/python examples/batches/setup.py /tmp/orders --days 10
"""

from jobserver.demo.warehouse import main

if __name__ == "__main__":
    main()
