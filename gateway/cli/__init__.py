"""The ``gateway`` command: main (serve, accounts, keys, usage), security and keycaps commands.

May import: everything (it is the top of the tree).
"""
