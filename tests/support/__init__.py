"""Plain helpers shared by the test files: the hand-made fixture traces and policies (`fixture`), the project's
and the shared data's paths (`paths`), releases run through the command line (`releases`), the scratch
environment every test process runs in (`environment`), and spies on the package (`spies`).

pytest fixtures stay in tests/conftest.py; nothing here changes the environment when it is imported.
tests/ is on pytest's `pythonpath` (pyproject.toml), so a test imports `from support.fixture import ...`."""
