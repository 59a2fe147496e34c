"""The test suite, a package: its modules import each other as ``tests.<module>`` (mypy checks them so)."""
