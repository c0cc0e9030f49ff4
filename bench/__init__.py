"""Load-testing harness for rpc-gateway: mock nodes, load generator, scenarios, report.

Run ``python -m bench --help`` for the scenarios; ``bench/README.md`` has the
commands and the numbers measured on the reference machine.
"""
