"""The test suite (``tests.helpers``: what the tests import; fixtures: the conftest files)."""
